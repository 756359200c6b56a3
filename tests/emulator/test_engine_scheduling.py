"""Scheduled messages and duplicate detection."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine
from sbdlq.errors import MessageNotFound
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from conftest import Clock, Helpers

Q = A("q")


def _later(clock: Clock, message_id: str, after_s: float) -> OutboundMessage:
    return OutboundMessage(body=b"x", message_id=message_id, scheduled_enqueue_time=clock.at(after_s))


def test_scheduled_messages_are_counted_and_materialise_at_their_time(engine: Engine, clock: Clock, h: Helpers) -> None:
    engine.create_queue("q", lock_duration_s=300)
    seqs = engine.send("q", [_later(clock, "s", 60), OutboundMessage(body=b"x", message_id="now")])
    c = engine.counts("q")
    assert (c.active, c.scheduled) == (1, 1)
    (peeked,) = [m for m in engine.peek(Q, 0, 10) if m.message_id == "s"]
    assert peeked.state == "scheduled" and peeked.scheduled_enqueue_time == clock.at(60)
    assert peeked.sequence_number == seqs[0]
    assert h.ids(engine.receive(Q, 10)) == ["now"]
    clock.advance(59.999)
    assert engine.receive(Q, 10) == []
    clock.advance(0.001)
    c = engine.counts("q")
    assert (c.active, c.scheduled) == (2, 0)  # one still locked, one due
    (m,) = engine.receive(Q, 10)
    assert m.message_id == "s" and m.enqueued_time == clock.at() and m.sequence_number == seqs[0]
    assert m.state == "active"


def test_scheduled_time_in_the_past_is_immediate(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q")
    engine.send("q", [_later(clock, "past", -60)])
    c = engine.counts("q")
    assert (c.active, c.scheduled) == (1, 0)
    (m,) = engine.receive(Q, 1)
    assert m.enqueued_time == clock.at()


def test_cancel_scheduled(engine: Engine, clock: Clock) -> None:
    engine.create_queue("q")
    seqs = engine.send("q", [_later(clock, "a", 60), _later(clock, "b", 60)])
    engine.cancel_scheduled("q", [seqs[0]])
    assert engine.counts("q").scheduled == 1
    clock.advance(60)
    assert [m.message_id for m in engine.receive(Q, 10)] == ["b"]


def test_cancel_scheduled_of_a_number_not_scheduled_cancels_nothing_and_names_it(engine: Engine, clock: Clock) -> None:
    """As Service Bus: MessageNotFound, "Missing sequence numbers", for an active message, one that
    fell due, one cancelled already; none of the call's numbers is cancelled."""
    engine.create_queue("q")
    (active,) = engine.send("q", [OutboundMessage(body=b"x")])
    due, later = engine.send("q", [_later(clock, "due", 10), _later(clock, "later", 60)])
    clock.advance(10)
    for numbers, missing in (([active, later], f"{active}"), ([due, later], f"{due}"), ([later, 999], "999")):
        with pytest.raises(MessageNotFound, match=f"^Messages not found. Missing sequence numbers: {missing}$"):
            engine.cancel_scheduled("q", numbers)
    assert (engine.counts("q").active, engine.counts("q").scheduled) == (2, 1)
    engine.cancel_scheduled("q", [later])
    with pytest.raises(MessageNotFound):
        engine.cancel_scheduled("q", [later])
    assert engine.counts("q").scheduled == 0


def test_scheduled_topic_messages_fan_out_when_due(engine: Engine, clock: Clock, h: Helpers) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "a")
    engine.create_subscription("t", "b", rules=[])
    (seq,) = engine.send("t", [_later(clock, "s", 30)])
    assert engine.counts("t/Subscriptions/a").active == 0
    clock.advance(30)
    # Peeking or counting a subscription shows what has materialised by now.
    assert engine.counts("t/Subscriptions/a").active == 1
    (m,) = engine.receive(A("t/Subscriptions/a"), 1)
    assert (m.message_id, m.sequence_number, m.enqueued_time) == ("s", seq, clock.at())
    assert engine.counts("t/Subscriptions/b").active == 0


def test_cancel_scheduled_on_a_topic(engine: Engine, clock: Clock) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "a")
    (seq,) = engine.send("t", [_later(clock, "s", 30)])
    engine.cancel_scheduled("t", [seq])
    clock.advance(30)
    assert engine.receive(A("t/Subscriptions/a"), 1) == []


def test_duplicate_detection_within_the_window(engine: Engine, clock: Clock, h: Helpers) -> None:
    engine.create_queue("q", requires_duplicate_detection=True, duplicate_window_s=60)
    engine.send("q", [OutboundMessage(body=b"1", message_id="a"), OutboundMessage(body=b"2", message_id="a")])
    clock.advance(30)
    engine.send("q", [OutboundMessage(body=b"3", message_id="a"), OutboundMessage(body=b"4", message_id="b")])
    assert [m.body for m in engine.peek(Q, 0, 10)] == [b"1", b"4"]
    clock.advance(31)  # 61 s after the first "a": outside the window
    engine.send("q", [OutboundMessage(body=b"5", message_id="a")])
    assert [m.body for m in engine.peek(Q, 0, 10)] == [b"1", b"4", b"5"]


def test_duplicate_detection_survives_completion(engine: Engine, clock: Clock, h: Helpers) -> None:
    engine.create_queue("q", requires_duplicate_detection=True, duplicate_window_s=600)
    engine.send("q", [OutboundMessage(body=b"1", message_id="a")])
    h.drain("q")
    engine.send("q", [OutboundMessage(body=b"2", message_id="a")])
    assert engine.counts("q").active == 0


def test_no_duplicate_detection_by_default(engine: Engine) -> None:
    engine.create_queue("q")
    engine.send("q", [OutboundMessage(body=b"1", message_id="a"), OutboundMessage(body=b"2", message_id="a")])
    assert engine.counts("q").active == 2


def test_duplicate_detection_on_a_topic(engine: Engine, clock: Clock) -> None:
    engine.create_topic("t", requires_duplicate_detection=True, duplicate_window_s=60)
    engine.create_subscription("t", "s")
    engine.send("t", [OutboundMessage(body=b"1", message_id="a")])
    engine.send("t", [OutboundMessage(body=b"2", message_id="a")])
    assert engine.counts("t/Subscriptions/s").active == 1
