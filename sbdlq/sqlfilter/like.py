"""LIKE patterns (`%` any run, `_` any one character, optional escape) compiled to matchers."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

Matcher = Callable[[str], bool]

# Markers for wildcards in a split pattern; literal text is a plain str.
_ANY_RUN = object()
_ANY_ONE = object()


def _split(pattern: str, escape: str | None) -> list[object]:
    """Pattern as a list of literal strings and wildcard markers; ValueError on a dangling escape."""
    parts: list[object] = []
    literal: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape:
            if i + 1 >= len(pattern):
                raise ValueError(f"LIKE pattern {pattern!r} ends with the escape character {escape!r}")
            literal.append(pattern[i + 1])
            i += 2
            continue
        if ch in "%_":
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(_ANY_RUN if ch == "%" else _ANY_ONE)
        else:
            literal.append(ch)
        i += 1
    if literal:
        parts.append("".join(literal))
    return parts


@lru_cache(maxsize=512)
def like_matcher(pattern: str, escape: str | None = None) -> Matcher:
    """A function telling whether a string matches `pattern` (case-sensitive, whole string)."""
    parts = _split(pattern, escape)
    # Most patterns are a prefix, suffix or substring test: skip the regex engine for them.
    if _ANY_ONE not in parts:
        texts = [p for p in parts if isinstance(p, str)]
        if not texts:
            return _always if parts else _is_empty
        if len(texts) == 1:
            text = texts[0]
            starts_open, ends_open = parts[0] is _ANY_RUN, parts[-1] is _ANY_RUN
            if starts_open and ends_open:
                return lambda s: text in s
            if ends_open:
                return lambda s: s.startswith(text)
            if starts_open:
                return lambda s: s.endswith(text)
            return lambda s: s == text
    regex = "".join(re.escape(p) if isinstance(p, str) else (".*" if p is _ANY_RUN else ".") for p in parts)
    compiled = re.compile(regex, re.DOTALL)
    return lambda s: compiled.fullmatch(s) is not None


def _always(s: str) -> bool:
    return True


def _is_empty(s: str) -> bool:
    return s == ""
