"""Split an encoded AMQP 1.0 message into its sections without decoding them.

The listener keeps `amqp-value` and `amqp-sequence` bodies as their encoded bytes so it can
hand them back unchanged, and it must look inside batch envelopes; both need the exact
byte boundaries of each section, which proton's decoder does not expose.
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78
BODY_CODES = frozenset({DATA, AMQP_SEQUENCE, AMQP_VALUE})

# Sections may also be described by symbol (spec §3.2); map those names to their codes.
_SYMBOLIC = {
    b"amqp:header:list": HEADER,
    b"amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    b"amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    b"amqp:properties:list": PROPERTIES,
    b"amqp:application-properties:map": APPLICATION_PROPERTIES,
    b"amqp:data:binary": DATA,
    b"amqp:amqp-sequence:list": AMQP_SEQUENCE,
    b"amqp:amqp-value:*": AMQP_VALUE,
    b"amqp:footer:map": FOOTER,
}

# Width of the fixed-size payload by the constructor's high nibble (spec §1.6).
_FIXED = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}


class MalformedMessage(ValueError):
    """The bytes are not a well-formed sequence of AMQP message sections."""


@dataclass(frozen=True, slots=True)
class Section:
    """One section: its descriptor code and its complete encoding (descriptor included)."""

    code: int
    raw: bytes


def _size_of(buf: memoryview, pos: int) -> int:
    """Offset just past the encoded value starting at pos."""
    if pos >= len(buf):
        raise MalformedMessage("truncated value")
    ctor = buf[pos]
    pos += 1
    if ctor == 0x00:  # described: a descriptor value, then the value
        return _size_of(buf, _size_of(buf, pos))
    nibble = ctor >> 4
    if nibble in _FIXED:
        end = pos + _FIXED[nibble]
    elif nibble in (0xA, 0xC, 0xE):
        if pos + 1 > len(buf):
            raise MalformedMessage("truncated size")
        end = pos + 1 + buf[pos]
    elif nibble in (0xB, 0xD, 0xF):
        if pos + 4 > len(buf):
            raise MalformedMessage("truncated size")
        end = pos + 4 + int.from_bytes(buf[pos : pos + 4], "big")
    else:
        raise MalformedMessage(f"unknown constructor 0x{ctor:02x}")
    if end > len(buf):
        raise MalformedMessage("truncated value")
    return end


def _descriptor_code(buf: memoryview, pos: int) -> tuple[int, int]:
    """The section code of the descriptor at pos, and where the described value starts."""
    end = _size_of(buf, pos)
    ctor = buf[pos]
    if ctor == 0x53:  # smallulong
        return buf[pos + 1], end
    if ctor == 0x80:  # ulong
        return int.from_bytes(buf[pos + 1 : pos + 9], "big"), end
    if ctor in (0xA3, 0xB3):  # sym8 / sym32
        head = 2 if ctor == 0xA3 else 5
        name = bytes(buf[pos + head : end])
        if name in _SYMBOLIC:
            return _SYMBOLIC[name], end
    raise MalformedMessage("not a message section descriptor")


def split(payload: bytes | memoryview) -> list[Section]:
    """The sections of an encoded message, in order; MalformedMessage when it isn't one."""
    buf = memoryview(payload)
    out: list[Section] = []
    pos = 0
    while pos < len(buf):
        if buf[pos] != 0x00:
            raise MalformedMessage("a message section must be a described value")
        code, value_at = _descriptor_code(buf, pos + 1)
        if not HEADER <= code <= FOOTER:
            raise MalformedMessage(f"unknown section 0x{code:x}")
        end = _size_of(buf, value_at)
        out.append(Section(code, bytes(buf[pos:end])))
        pos = end
    return out


def data_payload(section: Section) -> bytes:
    """The binary content of a `data` section."""
    buf = memoryview(section.raw)
    _, value_at = _descriptor_code(buf, 1)
    ctor = buf[value_at]
    if ctor == 0xA0:
        return bytes(buf[value_at + 2 :])
    if ctor == 0xB0:
        return bytes(buf[value_at + 5 :])
    raise MalformedMessage("a data section must hold binary")


def looks_like_message(payload: bytes) -> bool:
    """Whether payload is a whole encoded message with a body (used to spot batch envelopes)."""
    try:
        sections = split(payload)
    except MalformedMessage:
        return False
    codes = [s.code for s in sections]
    # Sections must appear in the order the spec fixes, and a message has a body, or at least
    # its properties: azure-servicebus sends no body section at all for a value body that is
    # None, 0, "" or False (a falsy value is left out), and such a message in a batch must not
    # turn the batch into one message.
    return bool(codes) and codes == sorted(codes) and any(c in BODY_CODES or c == PROPERTIES for c in codes)
