"""The `sys.` properties: canonical names, aliases, and which ones an action may SET."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from sbdlq.sqlfilter.errors import FilterEvaluationError
from sbdlq.sqlfilter.value_semantics import net_type, parse_datetime, parse_timespan, utc

# The system properties SET may change to a string ("SET performs implicit conversion if possible").
_SETTABLE_STRINGS = (
    "MessageId",
    "CorrelationId",
    "Label",
    "To",
    "ReplyTo",
    "ReplyToSessionId",
    "SessionId",
    "ContentType",
    "PartitionKey",
)
SYSTEM_PROPERTIES = (
    *_SETTABLE_STRINGS,
    "DeliveryCount",
    "SequenceNumber",
    "EnqueuedTimeUtc",
    "ScheduledEnqueueTimeUtc",
    "ExpiresAtUtc",
    "TimeToLive",
    "Size",
    "DeadLetterSource",
    "EnqueuedSequenceNumber",
    "LockToken",
    "LockedUntilUtc",
)

# Names are case-insensitive; `Subject` is the current SDKs' name for `Label`.
_BY_LOWER = {name.lower(): name for name in SYSTEM_PROPERTIES} | {"subject": "Label"}


def canonical(name: str) -> str | None:
    """The canonical name of system property `name` (any case, aliases resolved), or None."""
    return _BY_LOWER.get(name.lower())


def _cast_error(value: Any, target: str, prop: str) -> FilterEvaluationError:
    return FilterEvaluationError(
        "InvalidCastException", f"Cannot convert {net_type(value)} value {value!r} to {target} for sys.{prop}."
    )


def _to_string(prop: str) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, UUID):
            return str(value)
        raise _cast_error(value, "System.String", prop)

    return convert


def _to_timespan(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        span: timedelta | None = value
    elif isinstance(value, str):
        span = parse_timespan(value)
    else:
        span = None
    if span is None:
        raise _cast_error(value, "System.TimeSpan", "TimeToLive")
    if span <= timedelta(0):
        raise FilterEvaluationError("ArgumentOutOfRangeException", "sys.TimeToLive must be a positive time span.")
    return span


def _to_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return utc(value)
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None:
        raise _cast_error(value, "System.DateTime", "ScheduledEnqueueTimeUtc")
    return parsed


# The publicly settable properties of a message and how SET converts a value for each
# ("SET performs implicit conversion if possible"); broker-set ones are read-only.
SETTABLE: dict[str, Callable[[Any], Any]] = {name: _to_string(name) for name in _SETTABLE_STRINGS} | {
    "TimeToLive": _to_timespan,
    "ScheduledEnqueueTimeUtc": _to_datetime,
}
