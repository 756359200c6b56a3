"""wire.DeliveryIdRepair: client transfers with reused delivery-ids reach proton in sequence."""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("proton")

from proton import Data, Described, symbol, ulong

from sbdlq.emulator.amqp.wire import DeliveryIdRepair


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
    assert wire.outbound(_disposition(5, 7)) == _disposition(5, 7)


def test_close_error_without_info_gets_one() -> None:
    error = Described(ulong(0x1D), [symbol("amqp:session:invalid-field"), "sequencing error"])
    out = DeliveryIdRepair().outbound(_frame(Described(ulong(0x18), [error]), channel=0))
    condition = _fields(out)[0]
    assert isinstance(condition, Described)
    name, text, info = condition.value
    assert (name, text) == ("amqp:session:invalid-field", "sequencing error")
    assert info == {symbol("com.microsoft:tracking-id"): "sbdlq"}
