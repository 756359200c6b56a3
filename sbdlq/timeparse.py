"""Durations (`250ms`, `30s`, `5m`, `2h`, `3d`, ISO 8601 `PT1M`) and times (ISO 8601)."""

from __future__ import annotations

import contextlib
import math
import re
from datetime import UTC, datetime, timedelta

from sbdlq.errors import BadInput

# A bare number is seconds, as in timeout(1), curl and az.
_SIMPLE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$", re.IGNORECASE)
_ISO = re.compile(
    r"^P(?!$)(?:(?P<y>\d+)Y)?(?:(?P<mo>\d+)M)?(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<h>\d+)H)?(?:(?P<mi>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds in a duration; BadInput naming `what` otherwise."""
    raw = (text or "").strip()
    seconds = _duration_s(raw)
    if seconds is None:
        raise BadInput(f"invalid {what} {text!r}", hint="use e.g. 250ms, 30s, 5m, 2h, 3d or ISO 8601 like PT1M")
    if not math.isfinite(seconds):
        raise BadInput(f"invalid {what} {text!r}: out of range")
    return seconds


def _duration_s(raw: str) -> float | None:
    """Seconds in a duration (possibly inf for a number of hundreds of digits); None when it is not one."""
    m = _SIMPLE.match(raw)
    if m:
        return float(m.group(1)) * _UNIT_S[(m.group(2) or "s").lower()]
    m = _ISO.match(raw)
    if m:
        parts = {k: float(v) if v else 0.0 for k, v in m.groupdict().items()}
        return (
            parts["y"] * 365 * 86400
            + parts["mo"] * 30 * 86400
            + parts["w"] * 604800
            + parts["d"] * 86400
            + parts["h"] * 3600
            + parts["mi"] * 60
            + parts["s"]
        )
    return None


def ago(seconds: float, *, what: str, text: str, now: datetime | None = None) -> datetime:
    """The time `seconds` before now; BadInput naming `what` when that is before year 1."""
    try:
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    except OverflowError:
        raise BadInput(f"invalid {what} {text!r}: out of range (that long ago is before year 1)") from None


def parse_time(text: str, *, what: str = "time", now: datetime | None = None) -> datetime:
    """An ISO 8601 time (naive = UTC), or a duration meaning that long ago."""
    raw = (text or "").strip()
    if raw.isdigit() and len(raw) >= 8:
        # 20260131 is an ISO 8601 basic date, not 231 days of seconds.
        with contextlib.suppress(ValueError):
            return _utc(datetime.fromisoformat(raw))
    seconds = _duration_s(raw)
    if seconds is not None:
        return ago(seconds, what=what, text=text, now=now)
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadInput(f"invalid {what} {text!r}", hint="use ISO 8601 like 2026-01-31T12:00:00Z or a duration like 2h")
    return _utc(value)


def parse_ahead(text: str, *, what: str, now: datetime) -> datetime:
    """An ISO 8601 time (naive = UTC), or a duration meaning that long from now."""
    raw = (text or "").strip()
    seconds = None if raw.isdigit() and len(raw) >= 8 else _duration_s(raw)
    if seconds is None:
        return parse_time(raw, what=what, now=now)
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:
        raise BadInput(f"invalid {what} {text!r}: out of range") from None


def _utc(value: datetime) -> datetime:
    """value in UTC; a naive time is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def from_epoch_ms(ms: int | None) -> datetime | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000.0, UTC)


def to_epoch_ms(value: datetime) -> int:
    return int(round(value.timestamp() * 1000))
