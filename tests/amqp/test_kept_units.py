"""emulator/amqp/kept_sections.py: which sections a message keeps as sent, and how they meet its changed columns."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("proton")

from proton import Data, Described, int32, symbol, ulong
from proton import Message as ProtonMessage

from sbdlq.emulator.amqp import sections as sec
from sbdlq.emulator.amqp.codec import decode_message, encode_message
from sbdlq.models import Message

NOW = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def _stored(out: Any) -> Message:
    """The message as the engine hands it back (the fields the store keeps)."""
    return Message(
        sequence_number=7,
        body=out.body,
        enqueued_time=NOW,
        message_id=out.message_id,
        correlation_id=out.correlation_id,
        application_properties=dict(out.application_properties),
        body_type=out.body_type,
        amqp=out.amqp,
    )


def _wire(msg: Message) -> ProtonMessage:
    back = ProtonMessage()
    back.decode(encode_message(msg, delivery_count=0))
    return back


def test_a_plain_message_keeps_nothing_extra() -> None:
    out = decode_message(ProtonMessage(id="m", properties={"tenant": "eu", "n": 5}, body=b"x").encode())
    assert out.amqp is None


def test_an_int32_property_is_kept_and_sent_back_as_int32() -> None:
    out = decode_message(ProtonMessage(properties={"n": int32(5)}, body=b"x").encode())
    assert out.application_properties == {"n": 5}
    got = _wire(_stored(out)).properties
    assert type(got["n"]) is int32


def test_changed_and_added_properties_take_their_stored_value() -> None:
    out = decode_message(ProtonMessage(properties={"n": int32(5), "k": int32(1), "gone": int32(2)}, body=b"x").encode())
    msg = _stored(out)
    msg.application_properties["n"] = 6  # properties to modify, a rule action
    del msg.application_properties["gone"]
    msg.application_properties["DeadLetterReason"] = "why"
    got = _wire(msg).properties
    assert got == {"n": 6, "k": 1, "DeadLetterReason": "why"}
    assert type(got["n"]) is int and type(got["k"]) is int32


def test_a_typed_id_is_sent_back_only_while_the_column_names_it() -> None:
    ident = uuid.uuid4()
    out = decode_message(ProtonMessage(id=ulong(9), correlation_id=ident, body=b"x").encode())
    assert (out.message_id, out.correlation_id) == ("9", str(ident))
    kept = _stored(out)
    assert _wire(kept).correlation_id == ident
    kept.correlation_id = "renamed"  # a rule action set sys.CorrelationId
    assert _wire(kept).correlation_id == "renamed"


def test_broker_annotations_replace_the_senders() -> None:
    notes = {symbol("mine"): "x", symbol("x-opt-sequence-number"): 999, symbol("x-opt-locked-until"): 1}
    out = decode_message(ProtonMessage(annotations=notes, body=b"x").encode())
    got = {str(k): v for k, v in _wire(_stored(out)).annotations.items()}
    assert got["mine"] == "x" and got["x-opt-sequence-number"] == 7
    assert "x-opt-locked-until" not in got


def test_data_sections_are_sent_as_one_when_the_body_changed() -> None:
    def section(code: int, value: Any) -> bytes:
        data = Data()
        data.put_object(Described(ulong(code), value))
        return data.encode()

    out = decode_message(section(sec.DATA, b"a") + section(sec.DATA, b"b"))
    assert out.body == b"ab" and out.amqp is not None
    msg = _stored(out)
    assert [s.code for s in sec.split(encode_message(msg, delivery_count=0))].count(sec.DATA) == 2
    msg.body = b"edited"
    parts = [s for s in sec.split(encode_message(msg, delivery_count=0)) if s.code == sec.DATA]
    assert [sec.data_payload(s) for s in parts] == [b"edited"]
