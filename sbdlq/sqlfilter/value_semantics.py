"""Value semantics: C#-like comparison and arithmetic over Python values; None is unknown."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sbdlq.errors import BadInput
from sbdlq.sqlfilter.errors import FilterEvaluationError
from sbdlq.timeparse import parse_duration

# Kinds: values of the same kind compare; different kinds do not (C# has no implicit
# conversion between, say, string and long), except the string forms noted in `_coerce`.
NUM, STR, BOOL, TIME, SPAN, GUID, BYTES, OTHER = "num", "str", "bool", "time", "span", "guid", "bytes", "other"

_KINDS: dict[type, str] = {
    int: NUM,
    float: NUM,
    str: STR,
    bool: BOOL,
    datetime: TIME,
    timedelta: SPAN,
    UUID: GUID,
    bytes: BYTES,
}

# Kinds with equality but no order (C# defines no < on bool or Guid).
_UNORDERED = frozenset({BOOL, GUID, BYTES, OTHER})

_NET_NAMES: dict[type, str] = {
    bool: "System.Boolean",
    int: "System.Int64",
    float: "System.Double",
    str: "System.String",
    datetime: "System.DateTime",
    timedelta: "System.TimeSpan",
    UUID: "System.Guid",
    bytes: "System.Byte[]",
}

COMPARE_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
EQUALITY_OPS = frozenset({"=", "<>"})
# `c op x` is `x FLIPPED[op] c`.
FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1

# .NET TimeSpan text: [-][d.]hh:mm[:ss[.fffffff]].
_TIMESPAN = re.compile(r"^\s*(-)?(?:(\d+)\.)?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,7}))?)?\s*$")


def kind_of(value: Any) -> str:
    """The comparison kind of a non-None value."""
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    # Subclasses (IntEnum, str subclasses, pendulum datetimes...) take the parent's kind.
    for base, base_kind in _KINDS.items():
        if isinstance(value, base):
            return base_kind
    return OTHER


def net_type(value: Any) -> str:
    """The .NET type name an error message uses for `value`."""
    for base, name in _NET_NAMES.items():
        if isinstance(value, base):
            return name
    return type(value).__name__


def utc(value: datetime) -> datetime:
    """A naive datetime is taken as UTC, so naive and aware times compare."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def parse_datetime(text: str) -> datetime | None:
    """An ISO 8601 time (naive = UTC), or None when `text` is not one."""
    try:
        return utc(datetime.fromisoformat(text.strip()))
    except ValueError:
        return None


def parse_timespan(text: str) -> timedelta | None:
    """A .NET TimeSpan (`01:30:00`, `1.02:00:00`) or a duration (`90s`, `PT1M`); None otherwise."""
    m = _TIMESPAN.match(text)
    if m:
        sign, days, hours, minutes, seconds, fraction = m.groups()
        span = timedelta(
            days=int(days or 0),
            hours=int(hours),
            minutes=int(minutes),
            seconds=int(seconds or 0),
            microseconds=int((fraction or "0").ljust(7, "0")) / 10,
        )
        return -span if sign else span
    try:
        return timedelta(seconds=parse_duration(text))
    except (BadInput, OverflowError):
        return None


def coerce_text(text: str, kind: str) -> Any:
    """`text` as a value of `kind` (a time or a time span); None if it cannot be one."""
    # An extension over the docs: the grammar has no date or time span literal, so a
    # string stands for one (`sys.EnqueuedTimeUtc > '2024-05-01T00:00:00Z'`).
    if kind == TIME:
        return parse_datetime(text)
    if kind == SPAN:
        return parse_timespan(text)
    return None


def compare(op: str, a: Any, b: Any) -> bool | None:
    """`a op b`: TRUE / FALSE, or None (unknown) when either side is unknown or they don't compare."""
    if a is None or b is None:
        return None
    ka, kb = kind_of(a), kind_of(b)
    if ka != kb:
        if ka == STR:
            a, ka = coerce_text(a, kb), kb
        elif kb == STR:
            b = coerce_text(b, ka)
        else:
            return None
        if a is None or b is None:
            return None
    if ka in _UNORDERED and op not in EQUALITY_OPS:
        return None
    if ka == TIME:
        a, b = utc(a), utc(b)
    try:
        return COMPARE_OPS[op](a, b)
    except TypeError:
        return None


def equality_key(value: Any) -> Any:
    """A hashable key under which values that compare equal collide (1 and 1.0, not 1 and TRUE)."""
    kind = kind_of(value)
    if kind == TIME:
        return (kind, utc(value))
    return (kind, value)


# --- arithmetic -------------------------------------------------------------------------


def _wrap(r: int) -> int:
    # Int64 arithmetic wraps around in C#'s default (unchecked) context.
    if _INT_MIN <= r <= _INT_MAX:
        return r
    return ((r - _INT_MIN) % 2**64) + _INT_MIN


def _divide_by_zero() -> FilterEvaluationError:
    return FilterEvaluationError("DivideByZeroException", "Attempted to divide by zero.")


def _bad_operands(op: str, a: Any, b: Any) -> FilterEvaluationError:
    return FilterEvaluationError(
        "InvalidOperationException",
        f"Operator '{op}' cannot be applied to operands of type '{net_type(a)}' and '{net_type(b)}'.",
    )


def _int_op(op: str, a: int, b: int) -> int:
    if op == "+":
        return _wrap(a + b)
    if op == "-":
        return _wrap(a - b)
    if op == "*":
        return _wrap(a * b)
    if b == 0:
        raise _divide_by_zero()
    # C# integer division truncates toward zero and % takes the dividend's sign.
    if op == "/":
        q = abs(a) // abs(b)
        return _wrap(q if (a < 0) == (b < 0) else -q)
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _float_op(op: str, a: float, b: float) -> float:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        # C# would give Infinity or NaN here; a filter that divides by zero is a bug
        # worth surfacing, so it throws as integer division does.
        raise _divide_by_zero()
    return a / b if op == "/" else math.fmod(a, b)


def _time_op(op: str, a: Any, ka: str, b: Any, kb: str) -> Any:
    """DateTime and TimeSpan arithmetic; NotImplemented when C# defines no such operator."""
    if op == "-" and ka == kb == TIME:
        return utc(a) - utc(b)
    if op in "+-" and ka == TIME and kb == SPAN:
        return a + b if op == "+" else a - b
    if op == "+" and ka == SPAN and kb == TIME:
        return b + a
    if op in "+-" and ka == kb == SPAN:
        return a + b if op == "+" else a - b
    return NotImplemented


def arith(op: str, a: Any, b: Any) -> Any:
    """`a op b` for op in + - * / %; None when either side is unknown."""
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return _int_op(op, a, b)
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb == NUM:
        if isinstance(a, int) and isinstance(b, int):
            return _int_op(op, int(a), int(b))
        return _float_op(op, float(a), float(b))
    if ka == kb == STR and op == "+":
        return a + b
    try:
        result = _time_op(op, a, ka, b, kb)
    except OverflowError:
        raise FilterEvaluationError(
            "ArgumentOutOfRangeException", "The added or subtracted value results in an un-representable DateTime."
        )
    if result is NotImplemented:
        raise _bad_operands(op, a, b)
    return result


def negate(value: Any) -> Any:
    """Unary minus; None stays unknown."""
    if value is None:
        return None
    kind = kind_of(value)
    if kind == NUM:
        return _wrap(-value) if isinstance(value, int) else -value
    if kind == SPAN:
        return -value
    raise FilterEvaluationError(
        "InvalidOperationException", f"Operator '-' cannot be applied to operand of type '{net_type(value)}'."
    )


def plus(value: Any) -> Any:
    """Unary plus: numbers and time spans only; None stays unknown."""
    if value is None or kind_of(value) in (NUM, SPAN):
        return value
    raise FilterEvaluationError(
        "InvalidOperationException", f"Operator '+' cannot be applied to operand of type '{net_type(value)}'."
    )
