"""amqp-value and amqp-sequence body sections in pure Python: the public path for message bodies
that are not data, where the SDK's private codec (sdk_compat.encode_amqp_body) is not there.

It writes what the SDK's encoder writes for the same Python values (str → string, int → int,
long past 32 bits, float → double, bytes → binary, list, dict → map, datetime → timestamp,
UUID, bool, None), and reads every AMQP 1.0 primitive type (1.6), arrays and described values
included, so a body the SDK or any other client encoded reads back. A symbol reads as str,
char as a one-character str; decimals are refused (ValueError), as are bytes that are not
sections.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

_VALUE = 0x77
_SEQUENCE = 0x76
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT32 = range(-(2**31), 2**31)
_INT64 = range(-(2**63), 2**63)


# ---------------------------------------------------------------------- encode


def _sized(out: bytearray, small: int, large: int, payload: bytes) -> None:
    if len(payload) <= 0xFF:
        out += bytes((small, len(payload)))
    else:
        out += bytes((large,)) + struct.pack(">I", len(payload))
    out += payload


def _compound(out: bytearray, small: int, large: int, count: int, items: bytes) -> None:
    if len(items) + 1 <= 0xFF and count <= 0xFF:
        out += bytes((small, len(items) + 1, count))
    else:
        out += bytes((large,)) + struct.pack(">II", len(items) + 4, count)
    out += items


def _encode(out: bytearray, value: Any) -> None:
    if value is None:
        out.append(0x40)
    elif isinstance(value, bool):
        out += b"\x56\x01" if value else b"\x56\x00"  # as the SDK writes it
    elif isinstance(value, str):
        _sized(out, 0xA1, 0xB1, value.encode("utf-8"))
    elif isinstance(value, uuid.UUID):
        out += b"\x98" + value.bytes
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _sized(out, 0xA0, 0xB0, bytes(value))
    elif isinstance(value, float):
        out += b"\x82" + struct.pack(">d", value)
    elif isinstance(value, int):
        if -128 <= value <= 127:
            out += b"\x54" + struct.pack(">b", value)
        elif value in _INT32:
            out += b"\x71" + struct.pack(">i", value)
        elif value in _INT64:
            out += b"\x81" + struct.pack(">q", value)
        else:
            raise ValueError(f"an integer beyond 64 bits cannot be an AMQP value: {value}")
    elif isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        out += b"\x83" + struct.pack(">q", (moment - _EPOCH) // timedelta(milliseconds=1))
    elif isinstance(value, (list, tuple)):
        items = bytearray()
        for item in value:
            _encode(items, item)
        if not value:
            out.append(0x45)
        else:
            _compound(out, 0xC0, 0xD0, len(value), bytes(items))
    elif isinstance(value, dict):
        items = bytearray()
        for key, item in value.items():
            _encode(items, key)
            _encode(items, item)
        _compound(out, 0xC1, 0xD1, 2 * len(value), bytes(items))
    else:
        raise ValueError(f"cannot encode a {type(value).__name__} as an AMQP value")


def encode(*, value: Any = None, sequence: list[Any] | None = None) -> bytes:
    """One amqp-sequence section per item of `sequence` (each a list), else one amqp-value section."""
    out = bytearray()
    if sequence is not None:
        for section in sequence:
            out += bytes((0x00, 0x53, _SEQUENCE))
            _encode(out, list(section))
    else:
        out += bytes((0x00, 0x53, _VALUE))
        _encode(out, value)
    return bytes(out)


# ---------------------------------------------------------------------- decode

#: fixed-width types: constructor → (width, how the bytes read)
_FIXED: dict[int, tuple[int, Callable[[bytes], Any]]] = {
    0x50: (1, lambda b: b[0]),
    0x51: (1, lambda b: struct.unpack(">b", b)[0]),
    0x52: (1, lambda b: b[0]),
    0x53: (1, lambda b: b[0]),
    0x54: (1, lambda b: struct.unpack(">b", b)[0]),
    0x55: (1, lambda b: struct.unpack(">b", b)[0]),
    0x56: (1, lambda b: b[0] != 0),
    0x60: (2, lambda b: struct.unpack(">H", b)[0]),
    0x61: (2, lambda b: struct.unpack(">h", b)[0]),
    0x70: (4, lambda b: struct.unpack(">I", b)[0]),
    0x71: (4, lambda b: struct.unpack(">i", b)[0]),
    0x72: (4, lambda b: struct.unpack(">f", b)[0]),
    0x73: (4, lambda b: chr(struct.unpack(">I", b)[0])),
    0x80: (8, lambda b: struct.unpack(">Q", b)[0]),
    0x81: (8, lambda b: struct.unpack(">q", b)[0]),
    0x82: (8, lambda b: struct.unpack(">d", b)[0]),
    0x83: (8, lambda b: _EPOCH + timedelta(milliseconds=struct.unpack(">q", b)[0])),
    0x98: (16, lambda b: uuid.UUID(bytes=b)),
}
_EMPTY: dict[int, Any] = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: 0}


class _Reader:
    """A cursor over encoded bytes; every read checks it stays inside them."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("an AMQP value runs past the end of the body")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def size(self, wide: bool) -> int:
        return int(struct.unpack(">I", self.take(4))[0]) if wide else self.take(1)[0]

    def value(self, code: int | None = None, depth: int = 0) -> Any:
        if depth > 64:
            raise ValueError("AMQP values nested too deep")
        code = self.take(1)[0] if code is None else code
        if code == 0x00:  # described: the descriptor is dropped, the value kept
            self.value(depth=depth + 1)
            return self.value(depth=depth + 1)
        if code in _EMPTY:
            return _EMPTY[code]
        if code == 0x45:
            return []
        if code in _FIXED:
            width, read = _FIXED[code]
            return read(self.take(width))
        if code in (0xA0, 0xB0, 0xA1, 0xB1, 0xA3, 0xB3):
            raw = self.take(self.size(code >= 0xB0))
            return raw if code in (0xA0, 0xB0) else raw.decode("utf-8")
        if code in (0xC0, 0xD0, 0xC1, 0xD1):
            wide = code >= 0xD0
            end = self.size(wide) + self.pos
            items = [self.value(depth=depth + 1) for _ in range(self.size(wide))]
            if self.pos != end:
                raise ValueError("an AMQP list or map's size does not match its items")
            if code in (0xC0, 0xD0):
                return items
            if len(items) % 2:
                raise ValueError("an AMQP map with a key and no value")
            return dict(zip(items[::2], items[1::2], strict=True))
        if code in (0xE0, 0xF0):
            wide = code == 0xF0
            self.size(wide)
            count = self.size(wide)
            element = self.take(1)[0]
            if element == 0x00:
                self.value(depth=depth + 1)  # the elements' descriptor
                element = self.take(1)[0]
            return [self.value(element, depth + 1) for _ in range(count)]
        raise ValueError(f"AMQP type {code:#x} is not supported in a message body")


def decode(body: bytes) -> tuple[Any, list[Any] | None]:
    """(value, sequence) of encoded body sections: an amqp-value's value, or the amqp-sequence
    sections, one list each (None: there was none); ValueError on anything else."""
    reader = _Reader(bytes(body))
    value: Any = None
    sequence: list[Any] | None = None
    while reader.pos < len(reader.data):
        if reader.take(2) != b"\x00\x53":
            raise ValueError("a body section must start with a small-ulong descriptor")
        kind = reader.take(1)[0]
        if kind == _VALUE:
            value = reader.value()
        elif kind == _SEQUENCE:
            items = reader.value()
            if not isinstance(items, list):
                raise ValueError("an amqp-sequence section must hold a list")
            sequence = [*(sequence or []), items]
        else:
            raise ValueError(f"section {kind:#x} is not an amqp-value or amqp-sequence")
    return value, sequence
