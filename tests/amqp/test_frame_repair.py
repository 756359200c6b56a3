"""frame_repair.DeliveryIdRepair: client transfers with reused delivery-ids reach proton in sequence."""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("proton")

from proton import Data, Described, symbol, uint, ulong

from sbdlq.emulator.amqp.frame_repair import DeliveryIdRepair


def _frame(performative: Described, channel: int = 1, payload: bytes = b"") -> bytes:
    data = Data()
    data.put_object(performative)
    body = data.encode() + payload
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def _fields(frame: bytes) -> list[object]:
    data = Data()
    data.decode(frame[8:])
    data.rewind()
    data.next()
    obj = data.get_object()
    assert isinstance(obj, Described)
    return list(obj.value)


def _transfer(delivery_id: int, handle: int = 0, more: bool = False) -> bytes:
    from proton import uint

    fields = [uint(handle), uint(delivery_id), b"\x00\x00\x00\x01", uint(0), False, more]
    return _frame(Described(ulong(0x14), fields), payload=b"\x00Sw\xa1\x02hi")


def _disposition(first: int, last: int) -> bytes:
    from proton import uint

    accepted = Described(ulong(0x24), [])
    return _frame(Described(ulong(0x15), [True, uint(first), uint(last), True, accepted]))


def test_reused_delivery_id_is_renumbered_and_translated_back() -> None:
    wire = DeliveryIdRepair()
    got = [_fields(wire.inbound(_transfer(n)))[1] for n in (0, 1, 1, 3)]
    assert got == [0, 1, 2, 3]
    assert wire.repaired == 1
    out = wire.outbound(_disposition(1, 2))
    frames = []
    while out:
        size = struct.unpack_from(">I", out)[0]
        frames.append(_fields(out[:size]))
        out = out[size:]
    # one disposition per delivery, each with the id the client used
    assert [(f[1], f[2]) for f in frames] == [(1, 1), (1, 1)]


def test_in_sequence_traffic_passes_byte_for_byte() -> None:
    wire = DeliveryIdRepair()
    stream = b"AMQP\x00\x01\x00\x00" + _transfer(5) + _transfer(6, more=True) + _transfer(6) + _transfer(7)
    # split mid-frame: frames are reassembled before they are looked at
    assert wire.inbound(stream[:13]) + wire.inbound(stream[13:]) == stream
    written_out = _frame(Described(ulong(0x15), [True, uint(5), uint(7), True, Described(ulong(0x24), []), False]))
    assert wire.outbound(written_out) == written_out


def test_outbound_performatives_are_written_out_in_full() -> None:
    """azure-servicebus 7.14 reads fields by position: proton's shortened Open, Attach and
    transfers reach it with every field, defaults written out (explicit nulls too)."""
    wire = DeliveryIdRepair()
    opened = _fields(wire.outbound(_frame(Described(ulong(0x10), ["container", None, None]), channel=0)))
    assert opened == ["container", None, 4294967295, 65535, None, None, None, None, None, None]
    attach = _fields(wire.outbound(_frame(Described(ulong(0x12), ["link", uint(0), True]))))
    assert attach[3:5] == [2, 0] and attach[8] is False and len(attach) == 14
    frame = wire.outbound(_frame(Described(ulong(0x14), [uint(0), uint(9), b"t"]), payload=b"\x00Sw\xa1\x02hi"))
    fields = _fields(frame)
    assert (fields[:2], fields[3:6], len(fields)) == ([0, 9], [0, None, False], 11)
    assert frame.endswith(b"\x00Sw\xa1\x02hi")
    big = "x" * 300  # past a list8: rewritten as a list32
    assert _fields(wire.outbound(_frame(Described(ulong(0x10), [big]), channel=0)))[:3] == [big, None, 4294967295]


def test_close_error_without_info_gets_one() -> None:
    error = Described(ulong(0x1D), [symbol("amqp:session:invalid-field"), "sequencing error"])
    out = DeliveryIdRepair().outbound(_frame(Described(ulong(0x18), [error]), channel=0))
    condition = _fields(out)[0]
    assert isinstance(condition, Described)
    name, text, info = condition.value
    assert (name, text) == ("amqp:session:invalid-field", "sequencing error")
    assert info == {symbol("com.microsoft:tracking-id"): "sbdlq"}
