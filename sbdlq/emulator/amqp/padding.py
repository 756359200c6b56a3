"""Every performative the listener sends, with all its fields written out.

AMQP 1.0 (1.4, "composite types") lets a sender leave out trailing fields that hold their
default, and proton does. Service Bus writes every field, and some clients read a frame by
position: azure-servicebus 7.14's reader fails on proton's Open (`frame[4]`, IndexError), and
reads a transfer's payload at `frame[11]`. So each outbound performative (and SASL frame) is
rebuilt with its full field count: a missing field, or an explicit null for a field whose
default is not null, becomes its default written out; the other missing fields become nulls.
A frame already written in full passes through as it is (the same bytes object).
"""

from __future__ import annotations

import struct

_NULL = b"\x40"
_FALSE = b"\x42"
_UINT_MAX = b"\x70\xff\xff\xff\xff"

#: per performative (its descriptor code): the number of fields, and the encoding of each
#: field whose default is not null (AMQP 1.0 2.7 and 5.3), by index
_FIELDS: dict[int, tuple[int, dict[int, bytes]]] = {
    0x10: (10, {2: _UINT_MAX, 3: b"\x60\xff\xff"}),  # open: max-frame-size, channel-max
    0x11: (8, {4: _UINT_MAX}),  # begin: handle-max
    0x12: (14, {3: b"\x50\x02", 4: b"\x50\x00", 8: _FALSE}),  # attach: settle modes, incomplete-unsettled
    0x13: (11, {8: _FALSE, 9: _FALSE}),  # flow: drain, echo
    0x14: (11, {3: b"\x43", 5: _FALSE, 8: _FALSE, 9: _FALSE, 10: _FALSE}),  # transfer
    0x15: (6, {3: _FALSE, 5: _FALSE}),  # disposition: settled, batchable
    0x16: (3, {1: _FALSE}),  # detach: closed
    0x17: (1, {}),  # end
    0x18: (1, {}),  # close
    0x40: (1, {}),  # sasl-mechanisms
    0x41: (3, {}),  # sasl-init
    0x42: (1, {}),  # sasl-challenge
    0x43: (1, {}),  # sasl-response
    0x44: (2, {}),  # sasl-outcome
}


class Unparsed(Exception):
    """Bytes that are not a well-formed AMQP value where one was expected: the frame passes
    through unchanged (here and in frame_repair.py)."""


def pos_after_value(buf: bytes, pos: int) -> int:
    """The position after the AMQP value (of any type) that starts at pos."""
    code = buf[pos]
    if code == 0x00:  # described: a descriptor, then the value
        return pos_after_value(buf, pos_after_value(buf, pos + 1))
    width = code >> 4
    if code in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45):
        return pos + 1
    fixed = {0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}.get(width)
    if fixed is not None:
        end = pos + 1 + fixed
    elif width in (0xA, 0xC, 0xE):  # size in one byte
        end = pos + 2 + buf[pos + 1]
    elif width in (0xB, 0xD, 0xF):  # size in four bytes
        end = pos + 5 + struct.unpack_from(">I", buf, pos + 1)[0]
    else:
        raise Unparsed(f"constructor {code:#x}")
    if end > len(buf):
        raise Unparsed("value runs past the frame")
    return end


def written_out(body: bytes) -> bytes:
    """A frame body (performative, then any payload) with every field of the performative written out."""
    if len(body) < 4 or body[0] != 0x00 or body[1] != 0x53 or body[2] not in _FIELDS:
        return body
    full, defaults = _FIELDS[body[2]]
    kind, at = body[3], 4
    if kind == 0x45:
        count, start, end = 0, at, at
    elif kind == 0xC0:
        count, start, end = body[at + 1], at + 2, at + 1 + body[at]
    elif kind == 0xD0:
        size, count = struct.unpack_from(">II", body, at)
        start, end = at + 8, at + 4 + size
    else:
        raise Unparsed(f"performative list {kind:#x}")
    fields: list[bytes] = []
    pos = start
    for _ in range(count):
        after = pos_after_value(body, pos)
        fields.append(body[pos:after])
        pos = after
    if pos != end:
        raise Unparsed("performative list size does not match its fields")
    if count >= full and not any(fields[i] == _NULL for i in defaults):
        return body
    fields += [_NULL] * (full - count)
    for index, default in defaults.items():
        if fields[index] == _NULL:
            fields[index] = default
    items = b"".join(fields)
    if len(items) + 1 <= 0xFF and len(fields) <= 0xFF:
        head = bytes((0xC0, len(items) + 1, len(fields)))
    else:
        head = b"\xd0" + struct.pack(">II", len(items) + 4, len(fields))
    return body[:3] + head + items + body[end:]
