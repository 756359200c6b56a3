"""Application properties as JSON text, keeping the AMQP types JSON lacks."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

_TAG = "$sbdlq"


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return {_TAG: "datetime", "v": aware.isoformat()}
    if isinstance(value, bytes | bytearray | memoryview):
        from base64 import b64encode  # here: a store whose properties hold no bytes never needs it

        return {_TAG: "bytes", "v": b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {_TAG: "uuid", "v": str(value)}
    if isinstance(value, timedelta):
        return {_TAG: "timedelta", "v": value.total_seconds()}
    raise TypeError(f"application property of type {type(value).__name__} is not supported")


def _decode(obj: dict[str, Any]) -> Any:
    kind = obj.get(_TAG)
    if kind is None:
        return obj
    v = obj["v"]
    if kind == "datetime":
        return datetime.fromisoformat(v)
    if kind == "bytes":
        from base64 import b64decode

        return b64decode(v)
    if kind == "uuid":
        return uuid.UUID(v)
    if kind == "timedelta":
        return timedelta(seconds=v)
    if kind == "float":
        return float(v)
    return obj


# Built once: json.dumps with options builds a new encoder on every call, which is a third
# of the cost of sending a small message with properties.
# allow_nan=False: NaN and infinities are not JSON, and SQLite's JSON functions reject them.
_ENCODER = json.JSONEncoder(default=_encode, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# The C encoder _ENCODER.encode builds on every call, built once: that build and its Python
# wrapper were more than half the cost of encoding a few properties. The same settings; no
# circular-reference bookkeeping (property values are scalars, or the small tagged dicts of _encode).
_make_c_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Any = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(None, _encode, json.encoder.encode_basestring, None, ":", ",", False, False, False)
)


def encode_props(props: dict[str, Any]) -> str:
    """JSON text of non-empty properties (the hot path of send)."""
    try:
        if _C_ENCODE is not None:
            return "".join(_C_ENCODE(props, 0))
        return _ENCODER.encode(props)
    except ValueError:
        # A non-finite float: tagged, like the other types JSON lacks.
        return _ENCODER.encode({k: _finite(v) for k, v in props.items()})


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {_TAG: "float", "v": repr(value)}
    return value


def dump_props(props: dict[str, Any]) -> str | None:
    """JSON text of the properties, or None when there are none."""
    if not props:
        return None
    return encode_props(props)


def load_props(text: str | None) -> dict[str, Any]:
    """The properties back, types restored."""
    if not text:
        return {}
    if _TAG in text:
        result: dict[str, Any] = json.loads(text, object_hook=_decode)
        return result
    plain: dict[str, Any] = json.loads(text)
    return plain
