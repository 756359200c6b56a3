"""Messages round-trip intact through `emulator serve`: bodies, sections and property types.

Through the unmodified SDK (send, receive, peek, dead-letter, receive from the DLQ) and
through a bare proton client that reads the exact AMQP types on the wire.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from proton import (
    Data,
    Described,
    byte,
    char,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)
from proton import Message as ProtonMessage
from proton.utils import BlockingConnection
from support import Cli
from support.sdk import WAIT, drain

from sbdlq.addresses import parse_address
from sbdlq.emulator.amqp import sections as sec

WHEN = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _typed(kind: str, value: Any) -> dict[str, Any]:
    """A value the SDK encodes with the given AMQP type (it sends a plain int as int32)."""
    return {TYPE: kind, VALUE: value}


SDK_PROPERTIES = {
    "int32": 5,
    "long": _typed(AMQPTypes.long, 2**40),
    "double": 1.5,
    "uuid": ID,
    "timestamp": WHEN,
    "binary": _typed(AMQPTypes.binary, b"\x00\xff"),
    "text": "plain",
}
# What the SDK hands back (it shows a timestamp property as epoch milliseconds).
EXPECTED = {
    "int32": 5,
    "long": 2**40,
    "double": 1.5,
    "uuid": ID,
    "timestamp": 1_714_979_289_123,
    "binary": b"\x00\xff",
    "text": "plain",
}


def _props(message: Any) -> dict[str, Any]:
    """A received message's application properties with text keys (the SDK gives bytes)."""
    out = {}
    for k, v in (message.application_properties or {}).items():
        key = k.decode() if isinstance(k, bytes) else k
        out[key] = v.decode() if isinstance(v, bytes) and key == "text" else v
    return out


def _receive_one(client: Any, q: str, **kwargs: Any) -> Any:
    with client.get_queue_receiver(q, max_wait_time=WAIT, **kwargs) as receiver:
        got = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT)
        assert len(got) == 1
        return got[0], receiver


def test_typed_application_properties_survive_receive_peek_and_the_dlq(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    with client.get_queue_sender(q) as sender:
        sender.send_messages(ServiceBusMessage("typed", application_properties=SDK_PROPERTIES))
    with client.get_queue_receiver(q, max_wait_time=WAIT) as receiver:
        (peeked,) = receiver.peek_messages(max_message_count=1)
        assert _props(peeked) == EXPECTED
        (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT)
        assert _props(msg) == EXPECTED
        receiver.dead_letter_message(msg, reason="bad", error_description="typed")
    with client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=WAIT) as dlq:
        (dead,) = dlq.receive_messages(max_message_count=1, max_wait_time=WAIT)
        props = _props(dead)
        assert props.pop("DeadLetterReason") == b"bad"
        assert props.pop("DeadLetterErrorDescription") == b"typed"
        assert props == EXPECTED
        dlq.complete_message(dead)


def _annotated(**body: Any) -> AmqpAnnotatedMessage:
    return AmqpAnnotatedMessage(
        header={"priority": 7, "durable": True},
        annotations={"custom-note": "kept", "x-opt-partition-key": "pk"},
        footer={"footer-key": "footer-value"},
        properties={
            "message_id": "annotated",
            "user_id": b"someone",
            "group_id": "session-less-group",
            "group_sequence": 42,
            "reply_to_group_id": "reply-group",
            "creation_time": 1_700_000_000_123,
        },
        application_properties={"n": 3},
        **body,
    )


@pytest.mark.parametrize(
    ("body", "kind", "expected"),
    [
        ({"value_body": {"k": [1, 2], "s": "v"}}, AmqpMessageBodyType.VALUE, {b"k": [1, 2], b"s": b"v"}),
        ({"sequence_body": [[1, "a"], [2, "b"]]}, AmqpMessageBodyType.SEQUENCE, [[1, b"a"], [2, b"b"]]),
        ({"data_body": [b"first", b"second"]}, AmqpMessageBodyType.DATA, [b"first", b"second"]),
    ],
    ids=["value", "sequence", "data-sections"],
)
def test_annotated_messages_keep_their_sections(
    emulator: Any, client: Any, body: dict[str, Any], kind: Any, expected: Any
) -> None:
    q = emulator.queue()
    with client.get_queue_sender(q) as sender:
        sender.send_messages(_annotated(**body))
    with client.get_queue_receiver(q, max_wait_time=WAIT) as receiver:
        (peeked,) = receiver.peek_messages(max_message_count=1)
        (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT)
        receiver.dead_letter_message(msg, reason="r")
    with client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=WAIT) as dlq:
        (dead,) = dlq.receive_messages(max_message_count=1, max_wait_time=WAIT)
        dlq.complete_message(dead)
    for got in (peeked, msg, dead):
        raw = got.raw_amqp_message
        assert raw.body_type == kind
        assert (raw.body if kind == AmqpMessageBodyType.VALUE else list(raw.body)) == expected
        assert raw.header.priority == 7 and raw.header.durable is True
        assert raw.annotations[b"custom-note"] == b"kept"
        assert raw.annotations[b"x-opt-partition-key"] == b"pk"
        assert raw.footer == {b"footer-key": b"footer-value"}
        props = raw.properties
        assert props.user_id == b"someone"
        assert props.group_id == b"session-less-group"
        assert props.group_sequence == 42
        assert props.reply_to_group_id == b"reply-group"
        assert props.creation_time == 1_700_000_000_123
        assert got.application_properties[b"n"] == 3


# --- a bare proton client: the exact AMQP types on the wire ----------------------------------

WIRE_PROPERTIES = {
    "int32": int32(-7),
    "long": 2**40,
    "double": 2.5,
    "float": float32(1.5),
    "uuid": ID,
    "timestamp": timestamp(1_700_000_000_123),
    "binary": b"\x00\x01\xff",
    "byte": byte(-1),
    "short": short(-2),
    "ubyte": ubyte(3),
    "ushort": ushort(4),
    "uint": uint(5),
    "ulong": ulong(6),
    "char": char("x"),
    "symbol": symbol("sym"),
    "text": "plain",
    "bool": True,
}


def _section(code: int, value: Any) -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), value))
    return data.encode()


def _send_raw(conn: BlockingConnection, address: str, payload: bytes) -> None:
    """Send an encoded message as is (proton's Message can't hold several data sections or a footer)."""
    sender = conn.create_sender(address)
    delivery = sender.link.delivery(str(uuid.uuid4()))
    sender.link.send(payload)
    sender.link.advance()
    conn.wait(lambda: delivery.settled or delivery.remote_state is not None, timeout=30, msg="no settlement")
    sender.close()


def _peek_raw(conn: BlockingConnection, q: str) -> bytes:
    """The encoded message `$management` peek hands out."""
    node = f"{q}/$management"
    replies = conn.create_receiver(node, name=f"reply-{uuid.uuid4()}", credit=10)
    requests = conn.create_sender(node)
    request = ProtonMessage(
        id=uuid.uuid4(),
        reply_to=replies.link.name,
        properties={"operation": "com.microsoft:peek-message"},
        body={"from-sequence-number": ulong(0), "message-count": 1},
    )
    requests.send(request)
    reply = replies.receive(timeout=30)
    assert reply.properties["statusCode"] == 200
    return bytes(reply.body["messages"][0]["message"])


def _types(props: dict[Any, Any]) -> dict[str, tuple[type, Any]]:
    # proton hands binary out as a memoryview: compare it as bytes.
    return {str(k): (bytes, bytes(v)) if isinstance(v, memoryview) else (type(v), v) for k, v in props.items()}


def test_bare_proton_sees_the_types_it_sent(emulator: Any, conn: BlockingConnection) -> None:
    q = emulator.queue()
    sent = ProtonMessage(
        id=ulong(99),
        correlation_id=ID,
        user_id=b"me",
        durable=False,
        priority=9,
        properties=WIRE_PROPERTIES,
        annotations={symbol("custom"): int32(1), symbol("x-opt-sequence-number"): 12345},
        body=b"payload",
    )
    conn.create_sender(q).send(sent)
    (properties,) = [s for s in sec.split(_peek_raw(conn, q)) if s.code == sec.PROPERTIES]
    message_id = _value(properties.raw)[0]
    assert message_id == 99 and type(message_id) is ulong  # proton's Message shows any id as int
    receiver = conn.create_receiver(q, credit=1)
    got = receiver.receive(timeout=30)
    receiver.accept()
    assert _types(got.properties) == _types(WIRE_PROPERTIES)
    assert got.correlation_id == ID
    assert bytes(got.user_id) == b"me"
    assert got.durable is False and got.priority == 9
    notes = {str(k): v for k, v in got.annotations.items()}
    assert notes["custom"] == 1 and type(notes["custom"]) is int32
    # The broker's own annotations replace what a sender wrote there.
    assert notes["x-opt-sequence-number"] != 12345
    assert notes["x-opt-enqueue-sequence-number"] == notes["x-opt-sequence-number"]


def test_bare_proton_data_sections_and_footer_come_back_as_sent(emulator: Any, conn: BlockingConnection) -> None:
    q = emulator.queue()
    footer = {symbol("hash"): "abc"}
    payload = (
        _section(sec.PROPERTIES, ["m-1"])
        + _section(sec.APPLICATION_PROPERTIES, {"n": int32(1)})
        + _section(sec.DATA, b"one")
        + _section(sec.DATA, b"two")
        + _section(sec.FOOTER, footer)
    )
    _send_raw(conn, q, payload)
    parts = sec.split(_peek_raw(conn, q))
    assert [s.code for s in parts if s.code in sec.BODY_CODES] == [sec.DATA, sec.DATA]
    assert [sec.data_payload(s) for s in parts if s.code == sec.DATA] == [b"one", b"two"]
    assert parts[-1].raw == _section(sec.FOOTER, footer)


def test_peek_json_stays_plain_for_typed_and_value_messages(emulator: Any, client: Any, tmp_path: Path) -> None:
    q = emulator.queue()
    with client.get_queue_sender(q) as sender:
        sender.send_messages(ServiceBusMessage("typed", application_properties=SDK_PROPERTIES))
        sender.send_messages(AmqpAnnotatedMessage(value_body={"k": "v"}))
    with client.get_queue_receiver(q, max_wait_time=WAIT) as receiver:
        for msg in drain(receiver, 2):  # one receive may return the first before the second came
            receiver.dead_letter_message(msg, reason="typed")
    code, out, err = Cli(Path(emulator.store), tmp_path)("peek", q, "-o", "json")
    assert code == 0, err
    typed, value = json.loads(out)
    assert typed["application_properties"] == {
        "DeadLetterReason": "typed",
        "int32": 5,
        "long": 2**40,
        "double": 1.5,
        "uuid": str(ID),
        "timestamp": "2024-05-06T07:08:09.123000Z",
        "binary": "AP8=",
        "text": "plain",
    }
    assert (typed["body"], typed["body_encoding"]) == ("typed", "utf-8")
    # An amqp-value body is shown as its AMQP encoding (the section, descriptor included), in base64.
    assert value["body_encoding"] == "base64"
    (section,) = sec.split(base64.b64decode(value["body"]))
    assert section.code == sec.AMQP_VALUE and _value(section.raw) == {"k": "v"}


def _value(raw: bytes) -> Any:
    """The value of one encoded section."""
    data = Data()
    data.decode(raw)
    data.rewind()
    data.next()
    return data.get_object().value


def test_a_batch_holding_a_message_the_sdk_sent_without_a_body_stays_a_batch(emulator: Any, client: Any) -> None:
    """azure-servicebus leaves out the body of a value that is None (or 0, "", False): in a batch,
    that message must not make the listener take the whole batch for one message (6 lost)."""
    q = emulator.queue()
    values: list[Any] = [{"a": 1}, None, 7, 0, "x", "", [1]]
    batch = [AmqpAnnotatedMessage(value_body=v, properties={"message_id": f"v{i}"}) for i, v in enumerate(values)]
    with client.get_queue_sender(q) as sender:
        sender.send_messages(batch)
    kept = emulator.engine.peek(parse_address(q), 0, 100)
    assert [m.message_id for m in kept] == [f"v{i}" for i in range(len(values))]
    assert [m.body_type for m in kept] == ["value", "data", "value", "data", "value", "data", "value"]


def test_a_stored_integer_past_64_bits_does_not_stop_delivery(emulator: Any, client: Any) -> None:
    """The edges refuse such a value; one already stored goes out as text, and so do the messages behind it."""
    from sbdlq.models import OutboundMessage

    q = emulator.queue()
    emulator.engine.send(
        parse_address(q).entity,
        [
            OutboundMessage(body=b"big", message_id="big", application_properties={"n": 2**70}),
            OutboundMessage(body=b"next", message_id="next", application_properties={"n": 7}),
        ],
    )
    with client.get_queue_receiver(q, max_wait_time=WAIT) as receiver:
        got = drain(receiver, 2)
        props = {str(m.message_id): m.application_properties for m in got}
        for m in got:
            receiver.complete_message(m)
    assert set(props) == {"big", "next"}
    assert props["big"][b"n"] in (str(2**70), str(2**70).encode())
    assert props["next"][b"n"] == 7
