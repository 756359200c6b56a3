"""A client on another stack (python-qpid-proton's own blocking API), not the Service Bus SDK."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("proton")

from proton import Delivery, Link, Message, Timeout, int32, ulong
from proton.reactor import LinkOption
from proton.utils import BlockingConnection

from sbdlq.addresses import parse_address


class _MaxMessageSize(LinkOption):
    """Advertise our own max-message-size on attach."""

    def apply(self, link: Link) -> None:
        link.max_message_size = 4096


def test_reply_goes_to_the_link_named_by_reply_to(emulator: Any, conn: BlockingConnection) -> None:
    q = emulator.queue()
    emulator.seed(q, "peeked")
    node = f"{q}/$management"
    replies = conn.create_receiver(node, name="bare-reply-link", credit=10)  # no target address: reply-to = link name
    requests = conn.create_sender(node)
    request = Message(
        id=uuid.uuid4(),
        reply_to="bare-reply-link",
        properties={"operation": "com.microsoft:peek-message"},
        body={"from-sequence-number": ulong(0), "message-count": 1},
    )
    requests.send(request)
    reply = replies.receive(timeout=30)
    assert reply.correlation_id == request.id
    assert reply.properties["statusCode"] == 200
    assert len(reply.body["messages"]) == 1


def test_reply_to_nobody_is_dropped(emulator: Any, conn: BlockingConnection) -> None:
    q = emulator.queue()
    node = f"{q}/$management"
    replies = conn.create_receiver(node, name="listening", credit=10)
    requests = conn.create_sender(node)
    lost = Message(id="lost", reply_to="nobody", properties={"operation": "com.microsoft:peek-message"}, body={})
    kept = Message(id="kept", reply_to="listening", properties={"operation": "com.microsoft:peek-message"}, body={})
    requests.send(lost)
    requests.send(kept)
    reply = replies.receive(timeout=30)
    assert reply.correlation_id == "kept"  # the reply to nobody never arrives here


def test_own_max_message_size_and_bare_modified_abandons(emulator: Any, conn: BlockingConnection) -> None:
    q = emulator.queue()
    sender = conn.create_sender(q, options=_MaxMessageSize())
    sender.send(Message(body=b"x" * 100))
    receiver = conn.create_receiver(q, credit=1, options=_MaxMessageSize())
    message = receiver.receive(timeout=30)
    assert message.body == b"x" * 100
    receiver.fetcher.settle(Delivery.MODIFIED)  # modified, no delivery-failed: an abandon
    receiver.close()
    peeked = emulator.engine.peek(parse_address(q), 0, 1)
    assert [m.delivery_count for m in peeked] == [1]
    assert peeked[0].lock_token is None


def test_released_is_not_a_delivery_attempt_but_poison_still_dead_letters(
    emulator: Any, conn: BlockingConnection
) -> None:
    """`released` gives the delivery back, as Service Bus does; a client that only ever releases
    still drives the message into the DLQ after MaxDeliveryCount free releases."""
    q = emulator.queue(max_delivery_count=2)
    emulator.seed(q, "poison")
    receiver = conn.create_receiver(q, credit=0)
    counts = []
    for _ in range(4):
        receiver.flow(1)
        message = receiver.receive(timeout=30)
        counts.append(message.delivery_count)  # the header's count: attempts before this one
        receiver.fetcher.settle(Delivery.RELEASED)
    assert counts == [0, 0, 0, 1]
    receiver.flow(1)
    with pytest.raises(Timeout):
        receiver.receive(timeout=0.5)
    receiver.close()
    (dead,) = emulator.engine.peek(parse_address(f"{q}/$DeadLetterQueue"), 0, 5)
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert emulator.engine.counts(q).active == 0


def _request(conn: BlockingConnection, node: str, operation: str, body: Any, **props: Any) -> Message:
    """One request-response exchange on `node`; the reply."""
    name = f"reply-{uuid.uuid4()}"
    replies = conn.create_receiver(node, name=name, credit=1)
    request = Message(id=uuid.uuid4(), reply_to=name, properties={"operation": operation, **props}, body=body)
    sender = conn.create_sender(node)
    sender.send(request)
    reply = replies.receive(timeout=5)
    sender.close()
    replies.close()
    assert reply.correlation_id == request.id
    return reply


def test_status_codes_are_typed_int_as_service_bus_sends_them(emulator: Any, conn: BlockingConnection) -> None:
    """A strict client reads `status-code` / `statusCode` as AMQP int (proton: int32), not long."""
    q = emulator.queue()
    token = _request(conn, "$cbs", "put-token", "SharedAccessSignature sr=x&sig=y&se=9999999999&skn=k",
                     type="servicebus.windows.net:sastoken", name=f"amqp://127.0.0.1/{q}")  # fmt: skip
    assert token.properties["status-code"] == 202
    assert type(token.properties["status-code"]) is int32
    peek = _request(conn, f"{q}/$management", "com.microsoft:peek-message",
                    {"from-sequence-number": ulong(0), "message-count": 1})  # fmt: skip
    assert peek.properties["statusCode"] == 204
    assert type(peek.properties["statusCode"]) is int32
    unknown = _request(conn, f"{q}/$management", "com.microsoft:no-such-operation", {})
    assert type(unknown.properties["statusCode"]) is int32


def test_batch_delete_with_nothing_to_delete_is_message_not_found(emulator: Any, conn: BlockingConnection) -> None:
    """As Service Bus answers it: 404 with `com.microsoft:message-not-found`, never a bare 204."""
    q = emulator.queue()
    body = {"message-count": int32(10)}
    reply = _request(conn, f"{q}/$management", "com.microsoft:batch-delete-messages", body)
    assert reply.properties["statusCode"] == 404
    assert reply.properties["errorCondition"] == "com.microsoft:message-not-found"
    emulator.seed(q, "one")
    reply = _request(conn, f"{q}/$management", "com.microsoft:batch-delete-messages", body)
    assert (reply.properties["statusCode"], reply.body) == (200, {"message-count": 1})


def test_a_keyless_listener_refuses_links_until_a_token_is_put(emulator: Any) -> None:
    """As Service Bus: no link without a `$cbs` token, even when serve has no --key (then any
    well-formed token will do), so an app that forgets its token fails here too."""
    from proton.utils import LinkDetached
    from support.tokens import put_token

    q = emulator.queue()
    bare = BlockingConnection(f"amqp://127.0.0.1:{emulator.port}", sasl_enabled=True, allowed_mechs="ANONYMOUS")
    try:
        for attach in (lambda: bare.create_sender(q), lambda: bare.create_receiver(q, credit=1)):
            with pytest.raises(LinkDetached, match="amqp:unauthorized-access"):
                attach()
        assert put_token(bare, "SharedAccessSignature sr=sb%3A%2F%2Fh%2Fother&sig=x&se=9999999999&skn=k") == 202
        with pytest.raises(LinkDetached, match="amqp:unauthorized-access"):
            bare.create_sender(q)  # a token for another entity does not cover this one
        assert put_token(bare, f"SharedAccessSignature sr=sb%3A%2F%2Fh%2F{q}&sig=x&se=9999999999&skn=k") == 202
        bare.create_sender(q).send(Message(body=b"after the token"))
    finally:
        bare.close()
    (stored,) = emulator.engine.peek(parse_address(q), 0, 5)
    assert stored.body.endswith(b"after the token")


def test_batch_delete_past_standards_limit_is_refused_as_service_bus_words_it(
    emulator: Any, conn: BlockingConnection
) -> None:
    """A Premium-sized request (4,000) on Standard: 400 argument-out-of-range, nothing deleted."""
    q = emulator.queue()
    emulator.seed(q, "one", "two")
    body = {"message-count": int32(4000)}
    reply = _request(conn, f"{q}/$management", "com.microsoft:batch-delete-messages", body)
    assert reply.properties["statusCode"] == 400
    assert reply.properties["errorCondition"] == "com.microsoft:argument-out-of-range"
    assert reply.properties["statusDescription"] == (
        "Invalid Message Count : requested 4000. Message count should be between 1 and 500."
    )
    assert emulator.engine.counts(q).active == 2
