"""Tokenizer for the Service Bus SQL filter and action grammar."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sbdlq.sqlfilter.errors import SqlFilterSyntaxError

# Token kinds.
NUMBER = "number"
STRING = "string"
IDENT = "ident"  # regular identifier (may be a function name, SET or REMOVE)
QIDENT = "qident"  # [delimited] or "quoted" identifier: never a keyword
PARAM = "param"  # @name: a parameter of the filter or action, its value given beside the text
KEYWORD = "keyword"
OP = "op"
EOF = "eof"

KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "LIKE", "ESCAPE", "IS", "NULL", "EXISTS", "TRUE", "FALSE"})

_TWO_CHAR_OPS = frozenset({"<>", "!=", ">=", "<="})
_ONE_CHAR_OPS = frozenset("=<>+-*/%(),.;")

# <integer_constant> is a System.Int64.
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its kind, its value (text, number, keyword in upper case) and 1-based position."""

    kind: str
    value: Any
    pos: int
    text: str

    def describe(self) -> str:
        """How an error message names this token."""
        return "end of expression" if self.kind == EOF else repr(self.text)


def _is_ident_start(ch: str) -> bool:
    return ch.isalpha()


def _is_ident_part(ch: str) -> bool:
    # The docs' [_[:IsLetter:][:IsDigit:]]; isdecimal() is .NET's Char.IsDigit (category Nd).
    return ch == "_" or ch.isalpha() or ch.isdecimal()


def tokenize(text: str) -> list[Token]:
    """All tokens of `text`, ending with an EOF token."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        start = i
        if ch.isdigit() and ch.isascii():
            i, number = _number(text, i)
            tokens.append(Token(NUMBER, number, start + 1, text[start:i]))
        elif ch == "'":
            i, value = _quoted(text, i, "'", "'", "string constant")
            tokens.append(Token(STRING, value, start + 1, text[start:i]))
        elif ch == "[":
            i, value = _quoted(text, i, "[", "]", "delimited identifier")
            tokens.append(Token(QIDENT, value, start + 1, text[start:i]))
        elif ch == '"':
            i, value = _quoted(text, i, '"', '"', "quoted identifier")
            tokens.append(Token(QIDENT, value, start + 1, text[start:i]))
        elif ch == "@" and i + 1 < n and _is_ident_start(text[i + 1]):
            i += 2
            while i < n and _is_ident_part(text[i]):
                i += 1
            tokens.append(Token(PARAM, text[start:i], start + 1, text[start:i]))
        elif _is_ident_start(ch):
            i += 1
            while i < n and _is_ident_part(text[i]):
                i += 1
            word = text[start:i]
            upper = word.upper()
            if upper in KEYWORDS:
                tokens.append(Token(KEYWORD, upper, start + 1, word))
            else:
                tokens.append(Token(IDENT, word, start + 1, word))
        elif text[i : i + 2] in _TWO_CHAR_OPS:
            i += 2
            tokens.append(Token(OP, text[start:i], start + 1, text[start:i]))
        elif ch in _ONE_CHAR_OPS:
            i += 1
            tokens.append(Token(OP, ch, start + 1, ch))
        else:
            raise SqlFilterSyntaxError(f"unexpected character {ch!r}", start + 1)
    tokens.append(Token(EOF, None, n + 1, ""))
    return tokens


def _digits(text: str, i: int) -> int:
    while i < len(text) and text[i].isascii() and text[i].isdigit():
        i += 1
    return i


def _number(text: str, start: int) -> tuple[int, int | float]:
    """Integer (Int64), decimal (`2.0`) or approximate (`101.5E5`) constant starting at `start`."""
    i = _digits(text, start)
    is_float = False
    if i < len(text) and text[i] == ".":
        is_float = True
        i = _digits(text, i + 1)
    if i < len(text) and text[i] in "eE":
        j = i + 1
        if j < len(text) and text[j] in "+-":
            j += 1
        end = _digits(text, j)
        if end == j:
            raise SqlFilterSyntaxError(f"malformed number {text[start : j + 1]!r}", start + 1)
        is_float, i = True, end
    literal = text[start:i]
    if is_float:
        return i, float(literal)
    value = int(literal)
    if value > _INT64_MAX:
        raise SqlFilterSyntaxError(f"integer constant {literal} is out of range (Int64)", start + 1)
    return i, value


def _quoted(text: str, start: int, opener: str, closer: str, what: str) -> tuple[int, str]:
    """A string or identifier between `opener` and `closer`; a doubled closer is one closer."""
    parts: list[str] = []
    i = start + 1
    while True:
        end = text.find(closer, i)
        if end < 0:
            raise SqlFilterSyntaxError(f"unterminated {what}", start + 1)
        parts.append(text[i:end])
        if text.startswith(closer, end + 1):
            parts.append(closer)
            i = end + 2
            continue
        value = "".join(parts)
        if not value and opener != "'":
            raise SqlFilterSyntaxError(f"empty {what}", start + 1)
        return end + 1, value
