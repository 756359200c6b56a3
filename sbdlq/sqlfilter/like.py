"""LIKE patterns (`%` any run, `_` any one character, optional escape) compiled to matchers.

No regular expressions: a backtracking engine takes exponential time on a pattern such as
`%a%a%a%a%a%a%a%a%a%a%b` (an attacker's `--where`, or a rule from a Config.json), and Python's
`re` cannot be interrupted meanwhile. The general case is a two-pointer wildcard matcher:
O(len(pattern) * len(text)) at worst, with no recursion.
"""

from __future__ import annotations

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
    # One token per character; a run of `%` is one `%`.
    tokens: list[object] = []
    for p in parts:
        if isinstance(p, str):
            tokens.extend(p)
        elif not (p is _ANY_RUN and tokens and tokens[-1] is _ANY_RUN):
            tokens.append(p)
    return lambda s: _wildcard_match(tokens, s)


def _wildcard_match(tokens: list[object], text: str) -> bool:
    """Whether `text` matches the whole token list, in linear space and O(n*m) time.

    On a mismatch after a `%`, only the latest `%` is retried, one character further on:
    an earlier `%` never needs to take more, because whatever the later part matched
    further right it can match from the latest `%` as well (the classic wildcard argument).
    """
    t = p = 0
    star = -1  # index of the latest % in tokens
    resume = 0  # where in text the latest % started to absorb characters
    n, m = len(text), len(tokens)
    while t < n:
        token = tokens[p] if p < m else None
        if token is _ANY_RUN:
            star, resume = p, t
            p += 1
        elif token is not None and (token is _ANY_ONE or token == text[t]):
            t += 1
            p += 1
        elif star >= 0:
            resume += 1
            t, p = resume, star + 1
        else:
            return False
    while p < m and tokens[p] is _ANY_RUN:
        p += 1
    return p == m


def _always(s: str) -> bool:
    return True


def _is_empty(s: str) -> bool:
    return s == ""
