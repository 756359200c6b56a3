"""AMQP values ⇄ the plain Python values the engine stores (application properties)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from proton import UNDESCRIBED, Array, Described, char, symbol, timestamp

from sbdlq.models import fits_int64

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_timestamp(ms: int) -> datetime:
    """An AMQP timestamp (ms since the epoch) as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=int(ms))


def to_timestamp(when: datetime) -> timestamp:
    """An aware (or UTC-naive) datetime as an AMQP timestamp."""
    aware = when if when.tzinfo else when.replace(tzinfo=UTC)
    return timestamp(round((aware - _EPOCH).total_seconds() * 1000))


def to_plain(value: Any) -> Any:
    """A decoded AMQP value as something the engine can store (JSON types, datetime, bytes, uuid)."""
    if value is None or isinstance(value, bool | str | bytes | uuid.UUID):
        # symbol and char are str subclasses: plain str keeps JSON happy.
        return str(value) if isinstance(value, symbol | char) else value
    if isinstance(value, memoryview):
        return bytes(value)  # proton decodes binary as a view into its own buffer
    if isinstance(value, timestamp):
        return from_timestamp(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {str(to_plain(k)): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, Array):
        return [to_plain(v) for v in value.elements]
    if isinstance(value, Described):
        return to_plain(value.value)
    # decimals and other rarities: keep their text rather than refuse the message
    return str(value)


def to_amqp(value: Any) -> Any:
    """A stored value as something proton encodes with the type the SDK expects."""
    if isinstance(value, datetime):
        return to_timestamp(value)
    if isinstance(value, timedelta):
        # Service Bus encodes TimeSpan as ticks; plain milliseconds is what SDKs can read back.
        return int(value.total_seconds() * 1000)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {str(k): to_amqp(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_amqp(v) for v in value]
    if value is None or isinstance(value, bool | str | bytes | uuid.UUID | float):
        return value
    if isinstance(value, int):
        # Past an AMQP long no SDK could read it: as text, so the message (and those behind it)
        # is still delivered. The edges (--property, --set-property, replay) refuse such values.
        return int(value) if fits_int64(value) else str(value)
    return str(value)


class EmptyArray(ValueError):
    """An AMQP array with no elements was about to go into a reply (see `array`)."""


def array(element_type: int, items: Sequence[Any]) -> Array:
    """The AMQP array a reply carries: undescribed, as Service Bus writes them, and never empty.

    azure-servicebus 7.15's decoder (_pyamqp/_decode.py `_decode_array_*`) reads an empty
    array's size and count but not its element constructor, which AMQP 1.0 (1.2, "array")
    requires and proton writes: the byte left over desyncs the rest of the transfer, and the
    SDK fails reading it ("index out of bounds on dimension 1") and closes the receiver. So a
    request whose answer would hold one is refused by its operation (the SDK's own empty array
    has no constructor either: proton, like any conforming decoder, cannot read it), and
    EmptyArray here is the last guard: an internal-error reply, which every client can read.
    element_type: a proton `Data` type code (Data.TIMESTAMP, Data.LONG, ...).
    """
    if not items:
        raise EmptyArray("an empty AMQP array cannot go into a reply (azure-servicebus cannot decode one)")
    # proton's stub leaves UNDESCRIBED (an Array's "no descriptor") out of PythonAMQPData;
    # Array(None, ...) would write a described array with a null descriptor instead.
    return Array(UNDESCRIBED, element_type, *items)  # type: ignore[arg-type]


def as_list(value: Any) -> list[Any]:
    """An AMQP array or list (or a lone value) as a Python list."""
    if value is None:
        return []
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def as_text(value: Any) -> str | None:
    """A string-ish AMQP value (string, symbol, uuid, ulong, binary) as text."""
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.hex()
    if isinstance(value, memoryview):
        return as_text(bytes(value))
    if isinstance(value, int):
        return str(int(value))  # proton's ulong prints as "ulong(7)"
    return str(value)
