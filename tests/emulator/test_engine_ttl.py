"""Time to live: expires-at, entity default and ceiling, scheduling, lazy expiry, locks, DLQ."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from conftest import Clock, Helpers

Q = A("q")
DLQ = A("q/$DeadLetterQueue")


def _one(engine: Engine, ttl: float | None = None, **fields: object) -> None:
    engine.send("q", [OutboundMessage(body=b"x", message_id="m", time_to_live_s=ttl, **fields)])  # type: ignore[arg-type]


def test_expires_at_is_enqueued_time_plus_ttl(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q")
    _one(engine, ttl=60)
    (m,) = engine.peek(Q, 0, 1)
    assert m.time_to_live_s == 60
    assert m.expires_at == clock.at(60)


def test_entity_default_ttl_is_the_default(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q", default_ttl_s=3600)
    _one(engine)
    (m,) = engine.peek(Q, 0, 1)
    assert m.time_to_live_s == 3600 and m.expires_at == clock.at(3600)


def test_entity_default_ttl_is_the_ceiling(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q", default_ttl_s=3600)
    _one(engine, ttl=7200)
    _one(engine, ttl=60)
    longer, shorter = engine.peek(Q, 0, 2)
    assert longer.time_to_live_s == 3600 and longer.expires_at == clock.at(3600)
    assert shorter.time_to_live_s == 60


def test_never_expiring_messages_show_no_expiry(engine: Engine) -> None:
    engine.create_queue("q")
    _one(engine)
    (m,) = engine.peek(Q, 0, 1)
    # No TTL to speak of: shown as null rather than ten million days.
    assert m.time_to_live_s is None
    # Stored at the broker's max time, shown as null (the SDK shows None too).
    assert m.expires_at is None
    assert m.to_json()["expires_at"] is None


def test_invalid_ttl_is_bad_input(engine: Engine) -> None:
    from sbdlq.errors import BadInput

    engine.create_queue("q")
    with pytest.raises(BadInput):
        _one(engine, ttl=0)


def test_scheduled_messages_count_ttl_from_their_enqueue_time(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q")
    _one(engine, ttl=600, scheduled_enqueue_time=clock.at(300))
    (m,) = engine.peek(Q, 0, 1)
    assert m.expires_at == clock.at(900)
    clock.advance(300)
    (r,) = engine.receive(Q, 1)
    assert r.enqueued_time == clock.at() and r.expires_at == clock.at(600)
    engine.abandon(Q, [r.lock_token])
    clock.advance(599)
    assert len(engine.receive(Q, 1)) == 1


def test_expiry_is_lazy_counts_and_peek_still_show_expired(engine: Engine, clock: Clock, h: Helpers) -> None:
    engine.create_queue("q")
    _one(engine, ttl=10)
    clock.advance(11)
    assert engine.counts("q").active == 1
    assert h.peek_ids("q") == ["m"]
    assert engine.counts("q").active == 1  # counting and peeking are not receivers
    # A receiver is active: the expired message is never returned, and now it's gone.
    assert engine.receive(Q, 10) == []
    c = engine.counts("q")
    assert (c.active, c.dead_letter) == (0, 0)
    assert h.peek_ids("q") == []


def test_expired_goes_to_dlq_with_dead_lettering_on_expiration(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q", dead_lettering_on_expiration=True)
    _one(engine, ttl=10)
    engine.send("q", [OutboundMessage(body=b"y", message_id="live")])
    clock.advance(10)
    assert [m.message_id for m in engine.receive(Q, 10)] == ["live"]
    (dead,) = engine.peek(DLQ, 0, 10)
    assert dead.message_id == "m"
    assert dead.dead_letter_reason == "TTLExpiredException"
    assert dead.dead_letter_error_description == "The message expired and was dead lettered."


def test_receive_and_delete_never_returns_expired(engine: Engine, clock: Clock) -> None:
    from sbdlq.backends.base import ReceiveMode

    engine.create_queue("q", dead_lettering_on_expiration=True)
    _one(engine, ttl=10)
    clock.advance(10)
    assert engine.receive(Q, 1, mode=ReceiveMode.RECEIVE_AND_DELETE) == []
    assert engine.counts("q").dead_letter == 1


def test_locked_message_is_not_expired_until_its_lock_is_lost(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q", dead_lettering_on_expiration=True, lock_duration_s=60)
    _one(engine, ttl=10)
    (m,) = engine.receive(Q, 1)
    clock.advance(30)  # expired, but under lock: settling still works
    assert engine.renew_locks(Q, [m.lock_token]) != {}
    assert engine.complete(Q, [m.lock_token]) == []
    assert engine.counts("q").dead_letter == 0


def test_abandoning_an_expired_locked_message_expires_it(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q", dead_lettering_on_expiration=True, lock_duration_s=60)
    _one(engine, ttl=10)
    (m,) = engine.receive(Q, 1)
    clock.advance(30)
    engine.abandon(Q, [m.lock_token])
    c = engine.counts("q")
    assert (c.active, c.dead_letter) == (0, 1)
    assert engine.peek(DLQ, 0, 1)[0].dead_letter_reason == "TTLExpiredException"


@pytest.mark.parametrize("dl", [True, False])
def test_lock_lapsing_on_an_expired_message_expires_it(engine: Engine, clock: Clock, h: Helpers, dl: bool) -> None:
    engine.create_queue("q", dead_lettering_on_expiration=dl, lock_duration_s=60)
    _one(engine, ttl=10)
    engine.receive(Q, 1)
    clock.advance(61)
    # The lock expiring is when the expiry takes effect: the DLQ count shows it at once.
    c = engine.counts("q")
    assert (c.active, c.dead_letter) == (0, 1 if dl else 0)
    assert engine.receive(Q, 1) == []
    assert h.peek_ids("q/$DeadLetterQueue") == (["m"] if dl else [])


def test_expired_without_dead_lettering_is_dropped(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q")
    _one(engine, ttl=10)
    clock.advance(10)
    assert engine.receive(Q, 1) == []
    c = engine.counts("q")
    assert (c.active, c.dead_letter, c.transfer_dead_letter) == (0, 0, 0)


def test_deferred_messages_do_not_expire_into_the_dlq(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q", dead_lettering_on_expiration=True)
    _one(engine, ttl=10)
    (m,) = engine.receive(Q, 1)
    engine.defer(Q, [m.lock_token])
    clock.advance(3600)
    assert engine.receive(Q, 10) == []
    assert engine.counts("q").dead_letter == 0
    (d,) = engine.receive_deferred(Q, [m.sequence_number])
    clock.advance(1)
    engine.abandon(Q, [d.lock_token])  # abandoning doesn't expire it either
    assert engine.counts("q").dead_letter == 0
    assert engine.receive_deferred(Q, [m.sequence_number])[0].message_id == "m"


def test_the_dlq_does_not_observe_ttl(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q")
    _one(engine, ttl=10)
    (m,) = engine.receive(Q, 1)
    engine.dead_letter(Q, [m.lock_token], reason="bad", description="worse")
    clock.advance(86400 * 30)
    (d,) = engine.receive(DLQ, 1)
    assert d.message_id == "m"
    engine.abandon(DLQ, [d.lock_token])
    assert engine.counts("q").dead_letter == 1


def test_many_expired_messages_ahead_of_a_live_one(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q", dead_lettering_on_expiration=True)
    engine.send("q", [OutboundMessage(body=b"x", message_id=f"e{i}", time_to_live_s=5) for i in range(3000)])
    engine.send("q", [OutboundMessage(body=b"x", message_id="live")])
    clock.advance(6)
    assert [m.message_id for m in engine.receive(Q, 1)] == ["live"]
    c = engine.counts("q")
    assert (c.active, c.dead_letter) == (1, 3000)


def test_topic_ttl_smaller_than_subscription_ttl_applies(engine: Engine, clock: Clock) -> None:
    engine.create_topic("t", default_ttl_s=60)
    engine.create_subscription("t", "long", default_ttl_s=3600)
    engine.create_subscription("t", "short", default_ttl_s=30)
    engine.send("t", [OutboundMessage(body=b"x")])
    (a,) = engine.peek(A("t/Subscriptions/long"), 0, 1)
    (b,) = engine.peek(A("t/Subscriptions/short"), 0, 1)
    assert a.expires_at == clock.at(60)
    assert b.expires_at == clock.at(30)


def test_subscription_expiry_dead_letters_into_its_own_dlq(engine: Engine, clock: Clock) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "dl", dead_lettering_on_expiration=True)
    engine.create_subscription("t", "drop")
    engine.send("t", [OutboundMessage(body=b"x", time_to_live_s=5)])
    clock.advance(5)
    assert engine.receive(A("t/Subscriptions/dl"), 1) == []
    assert engine.receive(A("t/Subscriptions/drop"), 1) == []
    assert engine.counts("t/Subscriptions/dl").dead_letter == 1
    assert engine.counts("t/Subscriptions/drop").dead_letter == 0
