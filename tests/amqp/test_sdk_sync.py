"""The unmodified azure-servicebus SDK (sync) against `sbdlq emulator serve`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
)
from support.sdk import WAIT, bodies, drain

from sbdlq.addresses import parse_address


def test_send_single_list_and_batch(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    with client.get_queue_sender(q) as sender:
        sender.send_messages(ServiceBusMessage("one", subject="s1", application_properties={"n": 1}))
        sender.send_messages([ServiceBusMessage("two"), ServiceBusMessage("three")])
        batch = sender.create_message_batch()
        for text in ("four", "five", "six"):
            batch.add_message(ServiceBusMessage(text, correlation_id="c"))
        sender.send_messages(batch)
    assert emulator.engine.counts(q).active == 6
    peeked = emulator.engine.peek(parse_address(q), 0, 10)
    assert [m.body for m in peeked] == [b"one", b"two", b"three", b"four", b"five", b"six"]
    assert peeked[0].subject == "s1" and peeked[0].application_properties == {"n": 1}
    assert [m.sequence_number for m in peeked] == sorted(m.sequence_number for m in peeked)
    assert peeked[3].correlation_id == "c"


def test_peek_lock_complete(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, "a", "b")
    with client.get_queue_receiver(q) as receiver:
        got = drain(receiver, 2)
        assert bodies(got) == ["a", "b"]
        first = got[0]
        assert first.delivery_count == 0  # the header's "earlier failed attempts", as a real broker sends
        assert first.sequence_number >= 1 and first.enqueued_time_utc is not None
        assert first.locked_until_utc is not None and first.locked_until_utc > datetime.now(UTC)
        for m in got:
            receiver.complete_message(m)
    assert emulator.engine.counts(q).active == 0


def test_abandon_redelivers_with_delivery_count(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, "again")
    with client.get_queue_receiver(q) as receiver:
        (m,) = drain(receiver, 1)
        receiver.abandon_message(m)
        (m2,) = drain(receiver, 1)
        assert m2.sequence_number == m.sequence_number
        assert m2.delivery_count == 1
        receiver.complete_message(m2)


def test_settling_a_lost_lock_raises_lock_lost(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, "taken")
    with client.get_queue_receiver(q) as receiver:
        (m,) = drain(receiver, 1)
        # Someone else settles it first (another process on the same store).
        assert emulator.engine.complete(parse_address(q), [str(m.lock_token)]) == []
        with pytest.raises(MessageLockLostError):
            receiver.complete_message(m)


def test_dead_letter_with_reason_and_description(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, "poison", application_properties={"tenant": "eu"})
    with client.get_queue_receiver(q) as receiver:
        (m,) = drain(receiver, 1)
        receiver.dead_letter_message(m, reason="BadFormat", error_description="field x is missing")
    counts = emulator.engine.counts(q)
    assert (counts.active, counts.dead_letter) == (0, 1)
    with client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (d,) = drain(dlq, 1)
        assert d.dead_letter_reason == "BadFormat"
        assert d.dead_letter_error_description == "field x is missing"
        assert d.application_properties[b"tenant"] == b"eu"
        dlq.complete_message(d)
    assert emulator.engine.counts(q).dead_letter == 0


def test_defer_and_receive_deferred(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, "later")
    with client.get_queue_receiver(q) as receiver:
        (m,) = drain(receiver, 1)
        seq = m.sequence_number
        receiver.defer_message(m)
        assert receiver.receive_messages(max_wait_time=0.5) == []
        (d,) = receiver.receive_deferred_messages([seq])
        assert d.sequence_number == seq and bodies([d]) == ["later"]
        assert d.lock_token is not None
        receiver.complete_message(d)  # settles over $management update-disposition
    assert emulator.engine.counts(q).active == 0


def test_receive_and_delete(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, "x", "y")
    with client.get_queue_receiver(q, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
        got = drain(receiver, 2)
    assert bodies(got) == ["x", "y"]
    assert emulator.engine.counts(q).active == 0


def test_peek_from_sequence_number(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, *[str(i) for i in range(5)])
    with client.get_queue_receiver(q) as receiver:
        everything = receiver.peek_messages(max_message_count=10)
        assert bodies(everything) == ["0", "1", "2", "3", "4"]
        third = everything[2].sequence_number
        tail = receiver.peek_messages(max_message_count=2, sequence_number=third)
        assert [m.sequence_number for m in tail] == [third, third + 1]
        assert receiver.peek_messages(max_message_count=5, sequence_number=third + 100) == []
    assert emulator.engine.counts(q).active == 5  # peeking locks nothing


def test_renew_lock(emulator: Any, client: Any) -> None:
    q = emulator.queue(lock_duration_s=5)
    emulator.seed(q, "hold")
    with client.get_queue_receiver(q) as receiver:
        (m,) = drain(receiver, 1)
        before = m.locked_until_utc
        emulator.clock.advance(0.05)
        after = receiver.renew_message_lock(m)
        assert after > before
        assert m.locked_until_utc == after
        receiver.complete_message(m)


def test_max_delivery_count_moves_to_dlq(emulator: Any, client: Any) -> None:
    q = emulator.queue(max_delivery_count=2)
    emulator.seed(q, "unlucky")
    with client.get_queue_receiver(q) as receiver:
        for expected in (0, 1):
            (m,) = drain(receiver, 1)
            assert m.delivery_count == expected
            receiver.abandon_message(m)
        assert receiver.receive_messages(max_wait_time=0.5) == []
    with client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (d,) = dlq.peek_messages(max_message_count=5)
        assert d.dead_letter_reason == "MaxDeliveryCountExceeded"
        assert d.dead_letter_error_description == "Message could not be consumed after 2 delivery attempts."
        assert d.delivery_count == 2


def test_transfer_dead_letter_queue(emulator: Any, client: Any) -> None:
    target = emulator.queue()
    source = emulator.queue(forward_to=target)
    emulator.engine.set_status(target, "Disabled")
    emulator.seed(source, "stuck")
    with pytest.raises(MessagingEntityDisabledError), client.get_queue_sender(target) as sender:
        sender.send_messages(ServiceBusMessage("refused"))  # a rejected transfer, with its condition
    with client.get_queue_receiver(source, sub_queue=ServiceBusSubQueue.TRANSFER_DEAD_LETTER) as tdlq:
        (m,) = drain(tdlq, 1)
        assert bodies([m]) == ["stuck"]
        tdlq.complete_message(m)
    assert emulator.engine.counts(source).transfer_dead_letter == 0


def test_subscription_and_its_dlq(emulator: Any, client: Any) -> None:
    topic = emulator.topic("audit", "billing")
    with client.get_topic_sender(topic) as sender:
        sender.send_messages([ServiceBusMessage("e1"), ServiceBusMessage("e2")])
    with client.get_subscription_receiver(topic, "audit") as receiver:
        got = drain(receiver, 2)
        assert bodies(got) == ["e1", "e2"]
        receiver.complete_message(got[0])
        receiver.dead_letter_message(got[1], reason="Nope", error_description="not for audit")
    with client.get_subscription_receiver(topic, "audit", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (d,) = drain(dlq, 1)
        assert (d.dead_letter_reason, bodies([d])) == ("Nope", ["e2"])
        dlq.complete_message(d)
    with client.get_subscription_receiver(topic, "billing") as receiver:
        assert len(receiver.peek_messages(max_message_count=10)) == 2


def test_schedule_and_cancel(emulator: Any, client: Any) -> None:
    q = emulator.queue()
    later = datetime.now(UTC) + timedelta(hours=1)
    with client.get_queue_sender(q) as sender:
        seqs = sender.schedule_messages([ServiceBusMessage("s1"), ServiceBusMessage("s2")], later)
        assert len(seqs) == 2
        assert emulator.engine.counts(q).scheduled == 2
        sender.cancel_scheduled_messages(seqs[0])
    assert emulator.engine.counts(q).scheduled == 1
    with client.get_queue_receiver(q) as receiver:
        (p,) = receiver.peek_messages(max_message_count=5)
        assert p.state == ServiceBusMessageState.SCHEDULED
        assert p.scheduled_enqueue_time_utc is not None


def test_entity_not_found(emulator: Any, client: Any) -> None:
    with pytest.raises(MessagingEntityNotFoundError), client.get_queue_sender("nowhere") as sender:
        sender.send_messages(ServiceBusMessage("lost"))
    with pytest.raises(MessagingEntityNotFoundError), client.get_queue_receiver("nowhere") as receiver:
        receiver.receive_messages(max_wait_time=WAIT)
    with pytest.raises(MessagingEntityNotFoundError), client.get_queue_receiver("nowhere") as receiver:
        receiver.peek_messages()


def test_session_receivers(emulator: Any, client: Any) -> None:
    from azure.servicebus import NEXT_AVAILABLE_SESSION

    q = emulator.queue(requires_session=True)
    emulator.seed(q, "for-a", session_id="A")
    emulator.seed(q, "for-b", session_id="B")
    with client.get_queue_receiver(q, session_id="B") as receiver:
        (m,) = drain(receiver, 1)
        assert (bodies([m]), receiver.session.session_id) == (["for-b"], "B")
        receiver.complete_message(m)
    with client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT) as receiver:
        (m,) = drain(receiver, 1)
        assert (bodies([m]), receiver.session.session_id) == (["for-a"], "A")
        receiver.complete_message(m)
