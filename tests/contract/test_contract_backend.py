"""Every Backend primitive, as any backend must behave over the same store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from support import APPLICATION_PROPERTIES, full_message, ids, producer_fields

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.errors import EntityDisabled, EntityNotFound, InvalidOperation
from sbdlq.models import OutboundMessage
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.settle_recovery import still_in

if TYPE_CHECKING:
    from support import Seeder

Q = EntityPath("q")
MAIN = Address(Q)
DLQ = Address(Q, SubQueue.DEAD_LETTER)


def seqs(messages: list[Any]) -> list[int]:
    return [m.sequence_number for m in messages]


# ---------------------------------------------------------------- entities and counts


def test_list_entities_names_every_queue_topic_and_subscription(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("orders")
    seed.topic("events", "audit", "billing")
    got = {(e.path, e.kind) for e in aio(backend.list_entities())}
    assert got == {
        ("orders", "queue"),
        ("events", "topic"),
        ("events/Subscriptions/audit", "subscription"),
        ("events/Subscriptions/billing", "subscription"),
    }


def test_get_entity_reports_the_properties_operations_use(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("orders", lock_duration_s=45, max_delivery_count=3, requires_duplicate_detection=True)
    seed.topic("events", "audit")
    q = aio(backend.get_entity(EntityPath("orders")))
    assert (q.kind, q.lock_duration_s, q.max_delivery_count, q.requires_duplicate_detection) == ("queue", 45, 3, True)
    t = aio(backend.get_entity(EntityPath("events")))
    assert (t.kind, t.subscription_count) == ("topic", 1)
    assert aio(backend.get_entity(EntityPath("events", "audit"))).kind == "subscription"


@pytest.mark.parametrize("entity", [EntityPath("missing"), EntityPath("events", "missing")])
def test_get_entity_of_a_missing_entity_raises_entity_not_found(
    backend: Backend, seed: Seeder, aio: Any, entity: EntityPath
) -> None:
    seed.topic("events", "audit")
    with pytest.raises(EntityNotFound):
        aio(backend.get_entity(entity))


def test_counts_each_sub_queue(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 3)
    seed.send("q", seed.msgs(2, "a"))
    later = datetime.now(UTC) + timedelta(hours=1)
    seed.send("q", seed.msgs(1, "s", scheduled_enqueue_time=later))
    seed.transfer_dead_letter("fwd", 4)
    assert aio(backend.counts(Q)).to_json() == {
        "entity": "q",
        "active": 2,
        "dead_letter": 3,
        "transfer_dead_letter": 0,
        "scheduled": 1,
    }
    assert aio(backend.counts(EntityPath("fwd"))).transfer_dead_letter == 4


def test_counts_of_a_missing_entity_raises_entity_not_found(backend: Backend, seed: Seeder, aio: Any) -> None:
    with pytest.raises(EntityNotFound):
        aio(backend.counts(EntityPath("missing")))


# ---------------------------------------------------------------- peek


def test_peek_pages_by_sequence_number_without_locking(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 25)
    first = aio(backend.peek(DLQ, 0, 10))
    assert seqs(first) == list(range(1, 11))
    second = aio(backend.peek(DLQ, first[-1].sequence_number + 1, 10))
    assert seqs(second) == list(range(11, 21))
    assert seqs(aio(backend.peek(DLQ, 21, 10))) == [21, 22, 23, 24, 25]
    assert aio(backend.peek(DLQ, 26, 10)) == []
    # From the middle, and nothing was locked by browsing.
    assert seqs(aio(backend.peek(DLQ, 7, 3))) == [7, 8, 9]
    assert len(aio(backend.receive(DLQ, 100))) == 25


def test_peek_shows_the_dead_letter_fields(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 1, reason="Poison", description="bad json", subject="order", correlation_id="c1")
    (m,) = aio(backend.peek(DLQ, 0, 5))
    assert (m.dead_letter_reason, m.dead_letter_error_description) == ("Poison", "bad json")
    assert (m.subject, m.correlation_id, m.body, m.message_id) == ("order", "c1", b"m0", "m0")
    assert m.lock_token is None


# ---------------------------------------------------------------- receive and settle


def test_peek_lock_receive_locks_and_hides_the_messages(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q", lock_duration_s=30)
    seed.dead_letter("q", 3)
    before = datetime.now(UTC)
    got = aio(backend.receive(DLQ, 2))
    after = datetime.now(UTC)
    assert seqs(got) == [1, 2]
    for m in got:
        assert m.lock_token
        assert m.locked_until is not None
        # The broker locks them for 30 s from some moment of the call, however long the call took
        # (a second's slack each side: the broker's clock and ours round differently).
        assert before + timedelta(seconds=29) < m.locked_until < after + timedelta(seconds=31)
    # Another receiver gets only the unlocked one.
    assert seqs(aio(backend.receive(DLQ, 5))) == [3]
    assert aio(backend.receive(DLQ, 5, max_wait_s=0.1)) == []
    # Locked messages still count and still show in a peek.
    assert aio(backend.counts(Q)).dead_letter == 3
    assert len(aio(backend.peek(DLQ, 0, 10))) == 3


def test_receive_and_delete_removes_at_once(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 3)
    got = aio(backend.receive(DLQ, 2, mode=ReceiveMode.RECEIVE_AND_DELETE))
    assert ids(got) == ["m0", "m1"]
    assert all(m.lock_token is None for m in got)
    assert ids(seed.dlq("q")) == ["m2"]


def test_discard_deletes_in_order_and_leaves_locked_messages(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q", lock_duration_s=30)
    seed.dead_letter("q", 5)
    locked = aio(backend.receive(DLQ, 1))
    assert aio(backend.discard(DLQ, 2)) == 2
    assert ids(seed.dlq("q")) == ["m0", "m3", "m4"]
    assert aio(backend.discard(DLQ, 10)) == 2
    # The locked one is another receiver's: it stays.
    assert ids(seed.dlq("q")) == ids(locked)
    assert aio(backend.discard(DLQ, 10)) == 0


def test_complete_removes_only_the_completed(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 3)
    got = aio(backend.receive(DLQ, 3))
    assert aio(backend.complete(DLQ, got[:2])) == []
    assert ids(seed.dlq("q")) == ["m2"]


def test_a_message_given_twice_to_complete_is_completed_once(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 3)
    got = aio(backend.receive(DLQ, 3))
    aio(backend.complete(DLQ, [got[0], got[1], got[1], got[2]]))
    assert ids(seed.dlq("q")) == []


def test_a_complete_of_many_where_one_lock_was_lost_leaves_exactly_that_one(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    # The Service Bus backend completes consecutive deliveries in one disposition: when one
    # of them is refused it cannot tell which others went, and returns them all. Whatever a
    # backend returns, the messages still there are exactly the one whose lock was lost.
    seed.queue("q")
    seed.dead_letter("q", 6)
    got = aio(backend.receive(DLQ, 6))
    assert len(got) == 6
    seed.engine.abandon(DLQ, [got[2].lock_token or ""])  # its lock ends elsewhere; it stays
    lost = aio(backend.complete(DLQ, got))
    assert got[2] in lost
    assert ids(aio(still_in(backend, DLQ, lost, LoopStats()))) == ["m2"]
    assert ids(seed.dlq("q")) == ["m2"]


def test_abandon_makes_messages_available_again(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 2)
    got = aio(backend.receive(DLQ, 2))
    assert aio(backend.abandon(DLQ, got)) == []
    again = aio(backend.receive(DLQ, 5))
    assert seqs(again) == [1, 2]
    assert {m.lock_token for m in again}.isdisjoint({m.lock_token for m in got})


def test_release_gives_messages_back_counting_a_delivery_only_where_the_sdk_must_abandon(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    # How each backend gives back a message a selective run passed over: the emulator
    # backend releases it as it was; Service Bus clients have no release, so the
    # servicebus backend abandons it, and its DLQ delivery count goes up by 1 (README).
    seed.queue("q")
    seed.dead_letter("q", 2)
    before = [m.delivery_count for m in seed.dlq("q")]
    got = aio(backend.receive(DLQ, 2))
    assert aio(backend.release(DLQ, got)) == []
    increment = {"emulator": 0, "servicebus": 1}[backend.name]
    assert [m.delivery_count for m in seed.dlq("q")] == [n + increment for n in before]
    # Available again at once, under new locks.
    again = aio(backend.receive(DLQ, 5))
    assert seqs(again) == [1, 2]
    aio(backend.abandon(DLQ, again))


def test_abandon_in_the_main_queue_counts_a_delivery(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q", max_delivery_count=2)
    seed.send("q", seed.msgs(1))
    (m,) = aio(backend.receive(MAIN, 1))
    assert m.delivery_count == 1
    aio(backend.abandon(MAIN, [m]))
    (m,) = aio(backend.receive(MAIN, 1))
    assert m.delivery_count == 2
    aio(backend.abandon(MAIN, [m]))
    # Past MaxDeliveryCount: the broker dead-letters it.
    (d,) = seed.dlq("q")
    assert d.dead_letter_reason == "MaxDeliveryCountExceeded"


def test_dead_letter_moves_with_reason_and_description(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.send("q", seed.msgs(2))
    got = aio(backend.receive(MAIN, 2))
    assert aio(backend.dead_letter(MAIN, got[:1], "Poison", "cannot parse")) == []
    (d,) = seed.dlq("q")
    assert (d.message_id, d.dead_letter_reason, d.dead_letter_error_description) == ("m0", "Poison", "cannot parse")
    assert aio(backend.counts(Q)).active == 1


def test_dead_lettering_a_dlq_message_is_refused(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 1)
    got = aio(backend.receive(DLQ, 1))
    with pytest.raises(InvalidOperation):
        aio(backend.dead_letter(DLQ, got, "Again", "no"))


def test_renew_locks_extends_locked_until(backend: Backend, seed: Seeder, aio: Any, pause: Any) -> None:
    seed.queue("q", lock_duration_s=30)
    seed.dead_letter("q", 2)
    got = aio(backend.receive(DLQ, 2))
    first = [m.locked_until for m in got]
    pause(0.05)
    assert aio(backend.renew_locks(DLQ, got)) == []
    for m, before in zip(got, first, strict=True):
        assert m.locked_until is not None and before is not None
        assert m.locked_until > before


def test_lost_locks_are_returned_not_raised(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 3)
    got = aio(backend.receive(DLQ, 3))
    assert aio(backend.complete(DLQ, got[:1])) == []
    # The first one is gone: every settlement reports it lost and settles the others.
    assert seqs(aio(backend.renew_locks(DLQ, got))) == [1]
    assert seqs(aio(backend.abandon(DLQ, got[:2]))) == [1]
    again = aio(backend.receive(DLQ, 5))
    assert seqs(again) == [2]
    assert seqs(aio(backend.complete(DLQ, [got[1], got[2]]))) == [2]
    assert ids(seed.dlq("q")) == ["m1"]


def test_still_held_names_the_messages_whose_lock_can_still_be_settled(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    seed.queue("q")
    seed.dead_letter("q", 3)
    got = aio(backend.receive(DLQ, 3))
    assert seqs(aio(backend.still_held(DLQ, got))) == [1, 2, 3]
    assert aio(backend.complete(DLQ, got[:1])) == []
    assert seqs(aio(backend.still_held(DLQ, got))) == [2, 3]
    assert aio(backend.abandon(DLQ, got[1:2])) == []
    assert seqs(aio(backend.still_held(DLQ, got))) == [3]
    aio(backend.abandon(DLQ, got[2:]))


def test_an_expired_lock_is_lost(backend: Backend, seed: Seeder, aio: Any, pause: Any) -> None:
    seed.queue("q", lock_duration_s=0.2)
    seed.dead_letter("q", 1)
    got = aio(backend.receive(DLQ, 1))
    pause(0.3)
    assert seqs(aio(backend.renew_locks(DLQ, got))) == [1]
    assert seqs(aio(backend.complete(DLQ, got))) == [1]
    assert ids(seed.dlq("q")) == ["m0"]


# ---------------------------------------------------------------- send


def test_send_to_a_queue_keeps_every_property(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    out = full_message(body=b"\x00\xffbinary", content_type="application/octet-stream")
    aio(backend.send(Q, [out]))
    (m,) = aio(backend.receive(MAIN, 1))
    assert producer_fields(m) == producer_fields(out)
    assert m.application_properties == APPLICATION_PROPERTIES
    assert m.expires_at is not None
    assert m.expires_at - m.enqueued_time == timedelta(hours=1)


def test_send_to_a_topic_reaches_every_subscription(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.topic("t", "a", "b")
    aio(backend.send(EntityPath("t"), seed.msgs(2)))
    for sub in ("a", "b"):
        assert ids(seed.active(f"t/Subscriptions/{sub}")) == ["m0", "m1"]


def test_send_to_a_missing_entity_raises_entity_not_found(backend: Backend, seed: Seeder, aio: Any) -> None:
    with pytest.raises(EntityNotFound):
        aio(backend.send(EntityPath("missing"), seed.msgs(1)))


def test_send_to_a_disabled_queue_is_refused_and_nothing_lands(
    backend: Backend, seed: Seeder, aio: Any, engine: Any
) -> None:
    seed.queue("q")
    engine.set_status("q", "Disabled")
    with pytest.raises(EntityDisabled):
        aio(backend.send(Q, seed.msgs(2)))
    assert seed.counts("q").active == 0


def test_a_batch_send_is_all_or_nothing(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("s", requires_session=True)
    batch = [OutboundMessage(body=b"a", session_id="x"), OutboundMessage(body=b"b")]
    with pytest.raises(InvalidOperation):
        aio(backend.send(EntityPath("s"), batch))
    assert seed.counts("s").active == 0


def test_transfer_dead_letter_queue_is_its_own_sub_queue(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.transfer_dead_letter("fwd", 2)
    tdlq = Address(EntityPath("fwd"), SubQueue.TRANSFER_DEAD_LETTER)
    got = aio(backend.peek(tdlq, 0, 10))
    assert ids(got) == ["x0", "x1"]
    assert got[0].dead_letter_reason == "MessagingEntityNotFound"
    assert aio(backend.peek(Address(EntityPath("fwd"), SubQueue.DEAD_LETTER), 0, 10)) == []
    locked = aio(backend.receive(tdlq, 5))
    assert aio(backend.complete(tdlq, locked)) == []
    assert aio(backend.counts(EntityPath("fwd"))).transfer_dead_letter == 0


def test_a_message_over_the_entity_limit_is_refused_and_nothing_lands(backend: Backend, seed: Seeder, aio: Any) -> None:
    """256 KB by default (Standard), as MessageSizeExceeded on Service Bus: an InvalidOperation."""
    seed.queue("q")
    with pytest.raises(InvalidOperation):
        aio(backend.send(Q, [OutboundMessage(body=b"x" * 300_000)]))
    assert seed.counts("q").active == 0
    seed.queue("large", max_message_size_kb=1024)
    aio(backend.send(EntityPath("large"), [OutboundMessage(body=b"x" * 300_000)]))
    assert seed.counts("large").active == 1
