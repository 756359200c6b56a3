"""Scheduled messages through every backend: schedule, count, peek by sequence number, cancel."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import EntityNotFound, MessageNotFound
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from collections.abc import Callable

    from support import Seeder

Q = EntityPath("q")


def _messages(*ids: str) -> list[OutboundMessage]:
    return [OutboundMessage(body=i.encode(), message_id=i) for i in ids]


def test_schedule_returns_sequence_numbers_counted_as_scheduled_and_peeked_by_number(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    seed.queue("q")
    now = backend.now()
    times = [now + timedelta(hours=1), now + timedelta(hours=1), now + timedelta(hours=2)]
    numbers = aio(backend.schedule(Q, _messages("a", "b", "c"), times))
    assert len(numbers) == 3 and numbers == sorted(numbers) and len(set(numbers)) == 3
    assert (aio(backend.counts(Q)).active, aio(backend.counts(Q)).scheduled) == (0, 3)
    (peeked,) = aio(backend.peek(Address(Q), numbers[2], 1))
    assert (peeked.sequence_number, peeked.message_id, peeked.state) == (numbers[2], "c", "scheduled")
    assert peeked.scheduled_enqueue_time is not None
    assert abs((peeked.scheduled_enqueue_time - times[2]).total_seconds()) < 1


def test_cancel_scheduled_by_sequence_number(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    later = backend.now() + timedelta(hours=1)
    numbers = aio(backend.schedule(Q, _messages("a", "b"), [later, later]))
    aio(backend.cancel_scheduled(Q, [numbers[0]]))
    assert aio(backend.counts(Q)).scheduled == 1
    assert [m.message_id for m in aio(backend.peek(Address(Q), 0, 10))] == ["b"]
    # A number no longer scheduled is refused, as Service Bus refuses it, and the call cancels nothing.
    with pytest.raises(MessageNotFound):
        aio(backend.cancel_scheduled(Q, [numbers[1], numbers[0]]))
    assert aio(backend.counts(Q)).scheduled == 1


def test_scheduled_messages_become_active_at_their_time_in_order(
    backend: Backend, seed: Seeder, aio: Any, pause: Callable[[float], None]
) -> None:
    seed.queue("q")
    now = backend.now()
    aio(backend.schedule(Q, _messages("late"), [now + timedelta(hours=1)]))
    aio(backend.schedule(Q, _messages("first", "second"), [now + timedelta(seconds=1)] * 2))
    pause(2.5)
    counts = aio(backend.counts(Q))
    assert (counts.active, counts.scheduled) == (2, 1)
    got = aio(backend.receive(Address(Q), 10, max_wait_s=2.0))
    assert [m.message_id for m in got] == ["first", "second"]
    aio(backend.complete(Address(Q), got))


def test_schedule_on_a_topic_fans_out_when_due_and_cancels_by_number(
    backend: Backend, seed: Seeder, aio: Any, pause: Callable[[float], None]
) -> None:
    seed.topic("t", "s")
    topic = EntityPath("t")
    now = backend.now()
    kept, cancelled = aio(backend.schedule(topic, _messages("kept", "cancelled"), [now + timedelta(seconds=1)] * 2))
    aio(backend.cancel_scheduled(topic, [cancelled]))
    pause(2.5)
    got = aio(backend.receive(Address(EntityPath("t", "s")), 10, max_wait_s=2.0))
    assert [(m.message_id, m.sequence_number) for m in got] == [("kept", kept)]
    aio(backend.complete(Address(EntityPath("t", "s")), got))


def test_schedule_on_a_missing_queue_raises_entity_not_found(backend: Backend, seed: Seeder, aio: Any) -> None:
    with pytest.raises(EntityNotFound):
        aio(backend.schedule(EntityPath("missing"), _messages("a"), [backend.now() + timedelta(hours=1)]))
