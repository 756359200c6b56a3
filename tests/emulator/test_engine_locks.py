"""Peek-lock, renew, complete, abandon, lock expiry, MaxDeliveryCount, receive-and-delete, deferral."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.backends.base import ReceiveMode
from sbdlq.emulator.engine import Engine
from sbdlq.errors import MessageNotFound
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from conftest import Clock, Helpers

Q = A("q")
DLQ = A("q/$DeadLetterQueue")


@pytest.fixture
def q(engine: Engine) -> Engine:
    engine.create_queue("q", lock_duration_s=30, max_delivery_count=3)
    return engine


def test_peek_lock_holds_for_the_lock_duration(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", h.msgs(2))
    (m,) = q.receive(Q, 1)
    assert m.lock_token and m.locked_until == clock.at(30)
    # Another receiver gets the next one, not the locked one.
    assert h.ids(q.receive(Q, 5)) == ["m1"]
    clock.advance(29.9)
    assert q.receive(Q, 5) == []


def test_renew_extends_the_lock(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    clock.advance(20)
    renewed = q.renew_locks(Q, [m.lock_token])
    assert renewed == {m.lock_token: clock.at(30)}
    clock.advance(25)  # 45 s after receive: past the first lock, inside the renewed one
    assert q.receive(Q, 1) == []
    assert q.complete(Q, [m.lock_token]) == []
    assert q.counts("q").active == 0


def test_renewing_a_lost_lock_returns_nothing(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    clock.advance(31)
    assert q.renew_locks(Q, [m.lock_token]) == {}
    assert q.renew_locks(Q, ["not-a-token"]) == {}


def test_complete_removes(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(3))
    got = q.receive(Q, 2)
    assert q.complete(Q, [m.lock_token for m in got]) == []
    assert h.peek_ids("q") == ["m2"]
    assert q.counts("q").active == 1


def test_complete_with_a_lost_lock_keeps_the_message(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    clock.advance(30)
    assert q.complete(Q, [m.lock_token]) == [m.lock_token]
    assert h.peek_ids("q") == ["m0"]
    # Settling twice: the second attempt has no lock any more.
    (again,) = q.receive(Q, 1)
    assert q.complete(Q, [again.lock_token]) == []
    assert q.complete(Q, [again.lock_token]) == [again.lock_token]


def test_tokens_only_settle_on_their_own_queue(q: Engine, h: Helpers) -> None:
    q.create_queue("other")
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    assert q.complete(A("other"), [m.lock_token]) == [m.lock_token]
    assert q.complete(DLQ, [m.lock_token]) == [m.lock_token]
    assert q.complete(Q, [m.lock_token]) == []


def test_abandon_makes_it_available_again_at_the_front(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(3))
    first = q.receive(Q, 1)
    assert first[0].delivery_count == 1
    assert q.abandon(Q, [first[0].lock_token]) == []
    again = q.receive(Q, 3)
    assert h.ids(again) == ["m0", "m1", "m2"]
    assert [m.delivery_count for m in again] == [2, 1, 1]


def test_abandon_can_modify_properties(q: Engine) -> None:
    from sbdlq.models import OutboundMessage

    q.send("q", [OutboundMessage(body=b"x", application_properties={"a": 1, "b": "keep"})])
    (m,) = q.receive(Q, 1)
    q.abandon(Q, [m.lock_token], properties={"a": 2, "c": True})
    (m2,) = q.peek(Q, 0, 1)
    assert m2.application_properties == {"a": 2, "b": "keep", "c": True}


def test_lock_expiry_counts_as_a_delivery_and_returns_it_to_the_front(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", h.msgs(2))
    (m,) = q.receive(Q, 1)
    clock.advance(30)
    again = q.receive(Q, 2)
    assert h.ids(again) == ["m0", "m1"]
    assert again[0].delivery_count == 2
    assert again[0].lock_token != m.lock_token


@pytest.mark.parametrize("how", ["abandon", "lock-expiry"])
def test_past_max_delivery_count_goes_to_the_dlq(q: Engine, clock: Clock, h: Helpers, how: str) -> None:
    q.send("q", h.msgs(1))
    for attempt in range(1, 4):
        (m,) = q.receive(Q, 1)
        assert m.delivery_count == attempt
        if how == "abandon":
            q.abandon(Q, [m.lock_token])
        else:
            clock.advance(30)
    assert q.receive(Q, 1) == []
    c = q.counts("q")
    assert (c.active, c.dead_letter) == (0, 1)
    (dead,) = q.peek(DLQ, 0, 10)
    assert dead.message_id == "m0"
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert dead.dead_letter_error_description == "Message could not be consumed after 3 delivery attempts."
    assert dead.dead_letter_source is None


def test_lapsed_last_lock_shows_in_counts_without_a_receiver(q: Engine, clock: Clock, h: Helpers) -> None:
    # A lock expiring past MaxDeliveryCount is the broker's doing, not a lazy expiry:
    # `count` must see the DLQ grow even when no consumer is running any more.
    q.send("q", h.msgs(1))
    for _ in range(3):
        q.receive(Q, 1)
        clock.advance(31)
    c = q.counts("q")
    assert (c.active, c.dead_letter) == (0, 1)
    assert h.peek_ids("q") == []
    assert h.peek_ids("q/$DeadLetterQueue") == ["m0"]


def test_max_delivery_count_of_one(engine: Engine, h: Helpers) -> None:
    engine.create_queue("one", max_delivery_count=1)
    engine.send("one", h.msgs(1))
    (m,) = engine.receive(A("one"), 1)
    engine.abandon(A("one"), [m.lock_token])
    (dead,) = engine.peek(A("one/$DeadLetterQueue"), 0, 1)
    assert dead.dead_letter_error_description == "Message could not be consumed after 1 delivery attempts."


def test_abandon_with_a_lost_lock_is_reported(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    clock.advance(31)
    assert q.abandon(Q, [m.lock_token, "bogus"]) == [m.lock_token, "bogus"]


def test_receive_and_delete(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(3))
    got = q.receive(Q, 2, mode=ReceiveMode.RECEIVE_AND_DELETE)
    assert h.ids(got) == ["m0", "m1"]
    assert all(m.lock_token is None for m in got)
    assert got[0].delivery_count == 1
    assert h.peek_ids("q") == ["m2"]
    assert q.counts("q").active == 1


def test_receive_returns_at_most_max_count_in_order(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(250))
    got = q.receive(Q, 100)
    assert h.ids(got) == [f"m{i}" for i in range(100)]
    assert [m.sequence_number for m in got] == list(range(1, 101))


def test_defer_and_receive_by_sequence_number(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(2))
    (m,) = q.receive(Q, 1)
    assert q.defer(Q, [m.lock_token]) == []
    # Deferred messages are only reachable by sequence number.
    assert h.ids(q.receive(Q, 5)) == ["m1"]
    (peeked,) = [p for p in q.peek(Q, 0, 10) if p.message_id == "m0"]
    assert peeked.state == "deferred"
    (d,) = q.receive_deferred(Q, [m.sequence_number])
    assert d.message_id == "m0" and d.lock_token and d.state == "deferred"
    # Locked: a second receiver can't take it.
    with pytest.raises(MessageNotFound):
        q.receive_deferred(Q, [m.sequence_number])
    assert q.complete(Q, [d.lock_token]) == []
    assert h.peek_ids("q") == ["m1"]


def test_abandoned_deferred_message_stays_deferred(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    q.defer(Q, [m.lock_token])
    (d,) = q.receive_deferred(Q, [m.sequence_number])
    q.abandon(Q, [d.lock_token])
    assert q.receive(Q, 1) == []
    assert q.receive_deferred(Q, [m.sequence_number])[0].message_id == "m0"


def test_receive_deferred_of_a_message_that_is_not_deferred(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    with pytest.raises(MessageNotFound):
        q.receive_deferred(Q, [1])
    with pytest.raises(MessageNotFound):
        q.receive_deferred(Q, [99])


def test_receive_deferred_and_delete(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    q.defer(Q, [m.lock_token])
    (d,) = q.receive_deferred(Q, [m.sequence_number], mode=ReceiveMode.RECEIVE_AND_DELETE)
    assert d.message_id == "m0" and d.lock_token is None
    assert q.peek(Q, 0, 10) == []


def test_deferred_messages_count_as_active(q: Engine, h: Helpers) -> None:
    # The broker has no deferred counter: deferred messages are in ActiveMessageCount.
    q.send("q", h.msgs(2))
    (m,) = q.receive(Q, 1)
    q.defer(Q, [m.lock_token])
    assert q.counts("q").active == 2


def test_release_returns_the_delivery_attempt(engine: Engine) -> None:
    """AMQP `released`: the lock goes and the delivery count is as before the delivery."""
    engine.create_queue("q", max_delivery_count=3)
    engine.send("q", [OutboundMessage(body=b"x")])
    for _ in range(3):
        (m,) = engine.receive(A("q"), 1)
        assert m.delivery_count == 1
        assert engine.release(A("q"), [m.lock_token or ""]) == []
    assert engine.counts("q").dead_letter == 0
    unknown = "00000000-0000-0000-0000-000000000000"
    assert engine.release(A("q"), [unknown]) == [unknown]


def test_a_client_that_only_releases_still_dead_letters_a_poison_message(engine: Engine) -> None:
    """After MaxDeliveryCount free releases, each release counts as an abandon."""
    engine.create_queue("q", max_delivery_count=2)
    engine.send("q", [OutboundMessage(body=b"x")])
    counts = []
    for _ in range(4):
        (m,) = engine.receive(A("q"), 1)
        counts.append(m.delivery_count)
        engine.release(A("q"), [m.lock_token or ""])
    assert counts == [1, 1, 1, 2]
    assert engine.receive(A("q"), 1) == []
    (dead,) = engine.peek(A("q/$DeadLetterQueue"), 0, 5)
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert dead.dead_letter_error_description == "Message could not be consumed after 2 delivery attempts."


def test_releases_on_a_dead_letter_queue_are_free(engine: Engine) -> None:
    """The DLQ has no MaxDeliveryCount rule: releasing there never moves a message."""
    engine.create_queue("q", max_delivery_count=1)
    engine.send("q", [OutboundMessage(body=b"x")])
    (m,) = engine.receive(A("q"), 1)
    engine.dead_letter(A("q"), [m.lock_token or ""], "r", "d")
    dlq = A("q/$DeadLetterQueue")
    for _ in range(3):
        (d,) = engine.receive(dlq, 1)
        engine.release(dlq, [d.lock_token or ""])
    assert engine.counts("q").dead_letter == 1
