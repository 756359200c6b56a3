"""Fingerprints (DESIGN §5): a dead-letter description with its variable parts masked, and a stable id.

`Order 48213 not found in store eu-west-1` and `Order 7 not found in store us-east-2` are one
failure: both mask to the template `Order <num> not found in store <id>`. The id is a hash of
the masked reason and template under a versioned prefix (number-like placeholders made one:
`_NUMBER_LIKE`), so it is the same on every run, machine and backend; a change to the masks is
a new prefix and a CHANGELOG line.

The masks are one regular expression whose alternatives are tried left to right at each
position (`_PATTERN`); what each alternative becomes is `_replace`. Words stay: two failures
that differ in a word are two groups.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

from sbdlq.errors import BadInput

#: Part of every hashed text: a change to the masks or the hash is a new version (and ids).
VERSION = "fp1"
#: Hex digits of an id; `--fingerprint` takes them all or a prefix of at least MIN_PREFIX.
ID_LENGTH = 8
MIN_PREFIX = 4
#: What a missing reason or description is shown as (and hashed as the empty text).
NONE = "(none)"

_HEX = r"[0-9A-Fa-f]"
_PATTERN = re.compile(
    "|".join(
        (
            # a plain word, the most common part, matched first: it ends where no URL, e-mail or
            # token could go on (`https:` goes on with `//`, `jane.doe` with `@`)
            r"(?P<word>(?<![\w@.+-])[A-Za-z]+(?=[\s,;()\[\]!?'\"`=]|[.:](?:\s|$)|$))",
            # scheme://host[:port]/path?query: the host stays, variable segments and the query go
            r"(?P<url>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}|,;]+)",
            r"(?P<email>\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+)",
            # ISO 8601 and the common log forms, with optional time, fraction and zone
            r"(?P<ts>\b\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b"
            r"|\b\d{1,2}/\d{1,2}/\d{2,4}(?: \d{1,2}:\d{2}(?::\d{2})?(?: ?[AP]M)?)?"
            r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)",
            # a GUID ends where its hex does: `{guid}_G12` (a tracking id) is a GUID and a token
            rf"(?P<guid>(?<!{_HEX}){_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}(?!{_HEX}))",
            r"(?P<ip>\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b"
            rf"|\[{_HEX}{{0,4}}(?::{_HEX}{{0,4}}){{2,7}}\](?::\d{{1,5}})?"
            rf"|\b{_HEX}{{1,4}}(?::{_HEX}{{1,4}}){{7}}\b)",
            # a quote not inside a word (`doesn't` opens none), at most one line long
            r"(?P<quoted>(?<![\w'])'[^'\n]{0,200}'(?![\w'])|(?<![\w\"])\"[^\"\n]{0,200}\"(?![\w\"]))",
            # number-like parts never end inside a hyphenated token (`12345678-ab` is one token)
            r"(?P<duration>\b\d+(?:\.\d+)?(?:ms|us|µs|ns|s|sec|secs|m|min|mins|h|hr|hrs|d)\b(?!-\w)|\bP(?:T?\d+[HMSD])+\b)",
            rf"(?P<hex>\b0[xX]{_HEX}+\b)",
            # a number, signed, with decimals or thousands separators
            r"(?P<num>(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?!\w|-\w))",
            # a token of letters, digits, `_` and `-`: masked when it holds a digit (c-42, ch_8f7a91c2)
            r"(?P<token>[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*)",
        )
    )
)
#: A quoted value kept as it is: a name from code (a field, a constraint, a type), no digits.
_CODE_NAME = re.compile(r"[A-Za-z_$][A-Za-z_$.]{0,63}")
_SPACE = re.compile(r"\s+")
#: The placeholders of number-like parts, one in the hashed text: an id in hex or a queue id is
#: now and then all digits (`<num>` where its neighbours give `<id>`), and still the same part.
_NUMBER_LIKE = re.compile(r"<(?:num|id|hex|duration)>")
_TRAILING = ".,;:!?"


def _url(text: str) -> str:
    """scheme://host/path with each path segment that holds a digit masked, the query dropped."""
    tail = ""
    while text and text[-1] in _TRAILING:
        text, tail = text[:-1], text[-1] + tail
    scheme, _, rest = text.partition("://")
    rest, _, fragment = rest.partition("#")
    rest, query_sep, _ = rest.partition("?")
    host, slash, path = rest.partition("/")
    host = _PATTERN.sub(_replace, host) if any(c.isdigit() for c in host) else host
    segments = [_segment(s) for s in path.split("/")] if slash else []
    masked = f"{scheme}://{host}" + ("/" + "/".join(segments) if slash else "")
    return masked + ("?<*>" if query_sep else "") + ("#<*>" if fragment else "") + tail


def _segment(segment: str) -> str:
    if not segment or not any(c.isdigit() for c in segment):
        return segment
    return "<*>"


def _replace(m: re.Match[str]) -> str:
    kind = m.lastgroup
    text = m.group()
    if kind == "word":
        return text
    if kind == "url":
        return _url(text)
    if kind == "quoted":
        inner = text[1:-1]
        return text if _CODE_NAME.fullmatch(inner) else f"{text[0]}<str>{text[0]}"
    if kind == "token":
        return "<id>" if any(c.isdigit() for c in text) else text
    return f"<{kind}>"


def mask(text: str | None) -> str:
    """The text with its variable parts masked and its white space made single spaces."""
    if not text:
        return ""
    return _PATTERN.sub(_replace, _SPACE.sub(" ", text).strip())


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a failure looks like without its variable parts: its id, masked reason and template."""

    id: str
    reason: str
    template: str


@lru_cache(maxsize=1024)  # texts of up to 4 KB: at most a few MB held
def fingerprint(reason: str | None, description: str | None) -> Fingerprint:
    """The fingerprint of a dead-letter reason and error description (the same text often recurs)."""
    masked_reason = mask(reason)
    template = mask(description)
    text = f"{VERSION}\0{_NUMBER_LIKE.sub('<#>', masked_reason)}\0{_NUMBER_LIKE.sub('<#>', template)}".encode()
    return Fingerprint(
        id=hashlib.sha256(text).hexdigest()[:ID_LENGTH],
        reason=masked_reason or NONE,
        template=template or NONE,
    )


def message_fingerprint(m: object) -> Fingerprint:
    """The fingerprint of a message's dead-letter reason and description."""
    return fingerprint(getattr(m, "dead_letter_reason", None), getattr(m, "dead_letter_error_description", None))


_ID = re.compile(rf"[0-9a-f]{{{MIN_PREFIX},{ID_LENGTH}}}")


def parse_fingerprint_id(text: str) -> str:
    """A `--fingerprint` value: a whole id or a prefix of at least MIN_PREFIX hex digits, lower case."""
    value = text.strip().lower()
    if not _ID.fullmatch(value):
        raise BadInput(
            f"invalid --fingerprint {text!r}",
            hint=f"use an id from inspect-reason --by fingerprint: {MIN_PREFIX} to {ID_LENGTH} hex digits",
        )
    return value
