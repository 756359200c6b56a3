"""Sessions: one holder per session, next-available, lock duration, renewal and expiry, state,
listing, FIFO per session, and two processes sharing the locks (DESIGN §6)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine
from sbdlq.emulator.engine.errors import NoSessionAvailable, SessionCannotBeLocked, SessionLockLost
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from conftest import Clock

Q = A("q")


@pytest.fixture
def sq(engine: Engine) -> Engine:
    engine.create_queue("q", requires_session=True, lock_duration_s=30)
    return engine


def _send(engine: Engine, *pairs: tuple[str, str]) -> None:
    engine.send("q", [OutboundMessage(body=b"", message_id=mid, session_id=sid) for sid, mid in pairs])


def _ids(messages: list[object]) -> list[str | None]:
    return [getattr(m, "message_id", None) for m in messages]


def test_a_session_has_one_holder_at_a_time(sq: Engine, clock: Clock) -> None:
    got = sq.accept_session(Q, "A", "r1")
    assert (got.session_id, got.locked_until) == ("A", clock.at(30))
    with pytest.raises(SessionCannotBeLocked, match="'A'"):
        sq.accept_session(Q, "A", "r2")
    assert sq.accept_session(Q, "A", "r1").session_id == "A"  # the holder may ask again
    assert sq.accept_session(Q, "B", "r2").session_id == "B"  # an empty session can be accepted


def test_next_available_hands_out_distinct_sessions_oldest_first(sq: Engine) -> None:
    _send(sq, ("B", "b1"), ("A", "a1"), ("B", "b2"), ("C", "c1"))
    picks = [sq.accept_session(Q, None, f"r{i}").session_id for i in range(3)]
    assert picks == ["B", "A", "C"]
    with pytest.raises(NoSessionAvailable):
        sq.accept_session(Q, None, "r4")


def test_next_available_skips_sessions_without_receivable_messages(sq: Engine, clock: Clock) -> None:
    sq.send("q", [OutboundMessage(body=b"", session_id="later", scheduled_enqueue_time=clock.at(60))])
    with pytest.raises(NoSessionAvailable):
        sq.accept_session(Q, None, "r1")
    clock.advance(61)
    assert sq.accept_session(Q, None, "r1").session_id == "later"


def test_an_expired_session_lock_makes_the_session_available_again(sq: Engine, clock: Clock) -> None:
    _send(sq, ("A", "a1"), ("A", "a2"))
    sq.accept_session(Q, None, "r1")
    assert _ids(sq.receive(Q, 1, session_id="A", holder="r1")) == ["a1"]
    clock.advance(31)
    with pytest.raises(SessionLockLost):
        sq.receive(Q, 1, session_id="A", holder="r1")
    with pytest.raises(SessionLockLost):
        sq.renew_session_lock(Q, "A", "r1")
    assert sq.accept_session(Q, None, "r2").session_id == "A"
    # the message lock lapsed with the session lock: the new holder gets it first, again in order
    assert _ids(sq.receive(Q, 5, session_id="A", holder="r2")) == ["a1", "a2"]


def test_renewal_extends_the_session_lock(sq: Engine, clock: Clock) -> None:
    sq.accept_session(Q, "A", "r1")
    clock.advance(20)
    assert sq.renew_session_lock(Q, "A", "r1") == clock.at(30)
    clock.advance(20)  # 40 s after the accept, 20 s after the renewal
    with pytest.raises(SessionCannotBeLocked):
        sq.accept_session(Q, "A", "r2")
    with pytest.raises(SessionLockLost):
        sq.renew_session_lock(Q, "A", "r2")  # not its session


def test_a_released_session_can_be_taken_at_once(sq: Engine) -> None:
    _send(sq, ("A", "a1"))
    sq.accept_session(Q, None, "r1")
    sq.release_session(Q, "A", "r2")  # not the holder: nothing happens
    with pytest.raises(NoSessionAvailable):
        sq.accept_session(Q, None, "r2")
    sq.release_session(Q, "A", "r1")
    assert sq.accept_session(Q, None, "r2").session_id == "A"


def test_a_session_receiver_gets_only_its_session_in_order(sq: Engine) -> None:
    _send(sq, ("A", "a1"), ("B", "b1"), ("A", "a2"), ("B", "b2"), ("A", "a3"))
    sq.accept_session(Q, "A", "r1")
    assert _ids(sq.receive(Q, 2, session_id="A", holder="r1")) == ["a1", "a2"]
    assert _ids(sq.receive(Q, 5, session_id="A", holder="r1")) == ["a3"]
    assert [m.message_id for m in sq.peek(Q, 0, 10)] == ["a1", "b1", "a2", "b2", "a3"]


def test_session_state_needs_the_lock_and_round_trips(sq: Engine, clock: Clock) -> None:
    with pytest.raises(SessionLockLost):
        sq.set_session_state(Q, "A", b"x")
    sq.accept_session(Q, "A", "r1")
    assert sq.session_state(Q, "A", "r1") is None
    sq.set_session_state(Q, "A", b"START", "r1")
    assert sq.session_state(Q, "A") == b"START"
    with pytest.raises(SessionLockLost):
        sq.session_state(Q, "A", "r2")
    clock.advance(31)
    with pytest.raises(SessionLockLost):
        sq.session_state(Q, "A", "r1")
    sq.accept_session(Q, "A", "r2")
    assert sq.session_state(Q, "A", "r2") == b"START"  # state outlives the lock
    sq.set_session_state(Q, "A", None, "r2")
    assert sq.session_state(Q, "A", "r2") is None


def test_list_sessions_with_messages_or_state_and_by_last_update(sq: Engine, clock: Clock) -> None:
    _send(sq, ("B", "b1"), ("A", "a1"))
    sq.accept_session(Q, "S", "r1")
    assert sq.list_sessions(Q) == ["A", "B"]  # S has neither messages nor state
    sq.set_session_state(Q, "S", b"1", "r1")
    t_before = clock.at()
    clock.advance(5)
    sq.accept_session(Q, "A", "r2")
    sq.set_session_state(Q, "A", b"2", "r2")
    assert sq.list_sessions(Q) == ["A", "B", "S"]
    assert sq.list_sessions(Q, skip=1, top=1) == ["B"]
    assert sq.list_sessions(Q, updated_after=t_before) == ["A"]
    assert sq.list_sessions(Q, updated_after=t_before - timedelta(seconds=1)) == ["A", "S"]


def test_session_locks_are_shared_by_processes_on_one_store(sq: Engine, store: Path, clock: Clock) -> None:
    _send(sq, ("A", "a1"), ("B", "b1"))
    with Engine(store, clock=clock) as other:
        assert sq.accept_session(Q, None, "r1").session_id == "A"
        assert other.accept_session(Q, None, "r2").session_id == "B"
        with pytest.raises(SessionCannotBeLocked):
            other.accept_session(Q, "A", "r3")


def test_deleting_the_entity_forgets_its_sessions(sq: Engine) -> None:
    sq.accept_session(Q, "A", "r1")
    sq.delete_entity("q")
    sq.create_queue("q", requires_session=True)
    assert sq.accept_session(Q, "A", "r2").session_id == "A"


def test_messages_taken_through_a_session_are_held_as_long_as_the_session(sq: Engine, clock: Clock) -> None:
    _send(sq, ("A", "a1"))
    sq.accept_session(Q, "A", "r1")
    clock.advance(20)
    (m,) = sq.receive(Q, 1, session_id="A", holder="r1")
    assert m.locked_until == clock.at(10)  # the session lock's end, not 30 s from now
    clock.advance(5)
    sq.renew_session_lock(Q, "A", "r1")
    clock.advance(20)  # past the message's first lock, within the renewed session lock
    assert m.lock_token is not None and sq.complete(Q, [m.lock_token]) == []
