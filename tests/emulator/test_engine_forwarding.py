"""ForwardTo, ForwardDeadLetteredMessagesTo and the transfer dead-letter queue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from conftest import Clock, Helpers


def _tdlq(engine: Engine, path: str) -> list:  # type: ignore[type-arg]
    return engine.peek(A(f"{path}/$Transfer/$DeadLetterQueue"), 0, 100)


def test_forward_to_chain(engine: Engine, h: Helpers) -> None:
    engine.create_queue("c")
    engine.create_queue("b", forward_to="c")
    engine.create_queue("a", forward_to="b")
    engine.send("a", h.msgs(2))
    assert engine.counts("a").active == 0 and engine.counts("b").active == 0
    got = h.drain("c")
    assert h.ids(got) == ["m0", "m1"]
    assert [m.sequence_number for m in got] == [1, 2]  # numbered by the entity they rest in


def _forwarding_chain(engine: Engine, hops: int) -> None:
    """Queues q0 → q1 → ... → q<hops>, each forwarding to the next; the last one keeps what it gets."""
    engine.create_queue(f"q{hops}")
    for i in range(hops - 1, -1, -1):
        engine.create_queue(f"q{i}", forward_to=f"q{i + 1}")


def test_four_hops_are_allowed(engine: Engine, h: Helpers) -> None:
    _forwarding_chain(engine, 4)
    engine.send("q0", h.msgs(1))
    assert engine.counts("q4").active == 1


def test_more_than_four_hops_stop_in_the_transfer_dlq(engine: Engine, h: Helpers) -> None:
    _forwarding_chain(engine, 5)
    engine.send("q0", h.msgs(1))
    assert engine.counts("q5").active == 0
    c = engine.counts("q4")
    assert (c.active, c.dead_letter, c.transfer_dead_letter) == (0, 0, 1)
    (m,) = _tdlq(engine, "q4")
    assert m.message_id == "m0"
    assert m.dead_letter_reason == "MaxTransferHopCountExceeded"
    assert m.dead_letter_error_description is None  # Microsoft's table: description null


def test_forwarding_loop_ends_in_a_transfer_dlq(engine: Engine, h: Helpers) -> None:
    engine.create_queue("x")
    engine.create_queue("y", forward_to="x")
    engine.create_queue("x", exist_ok=True, forward_to="y")
    engine.send("x", h.msgs(1))
    total = sum(engine.counts(p).transfer_dead_letter for p in ("x", "y"))
    assert total == 1


def test_disabled_destination_goes_to_the_transfer_dlq(engine: Engine, h: Helpers) -> None:
    engine.create_queue("dest", status="Disabled")
    engine.create_queue("src", forward_to="dest")
    engine.send("src", h.msgs(1))
    c = engine.counts("src")
    assert (c.active, c.transfer_dead_letter) == (0, 1)
    (m,) = _tdlq(engine, "src")
    assert m.dead_letter_reason and "disabled" in (m.dead_letter_error_description or "").lower()


def test_deleted_destination_goes_to_the_transfer_dlq(engine: Engine, h: Helpers) -> None:
    engine.create_queue("dest")
    engine.create_queue("src", forward_to="dest")
    engine.delete_entity("dest")
    engine.send("src", h.msgs(1))
    (m,) = _tdlq(engine, "src")
    assert m.message_id == "m0" and m.dead_letter_reason


def test_full_destination_goes_to_the_transfer_dlq(engine: Engine, h: Helpers) -> None:
    engine.create_queue("dest", max_size=2)
    engine.create_queue("src", forward_to="dest")
    engine.send("src", h.msgs(3))
    assert engine.counts("dest").active == 2
    (m,) = _tdlq(engine, "src")
    assert m.message_id == "m2"


def test_transfer_dlq_is_receivable(engine: Engine, h: Helpers) -> None:
    engine.create_queue("src", forward_to="gone")
    engine.send("src", h.msgs(2))
    got = h.drain("src/$Transfer/$DeadLetterQueue")
    assert h.ids(got) == ["m0", "m1"]
    assert engine.counts("src").transfer_dead_letter == 0


def test_forward_dead_lettered_messages_to(engine: Engine, h: Helpers) -> None:
    engine.create_queue("parking")
    engine.create_queue("q", forward_dead_lettered_to="parking", max_delivery_count=1)
    engine.send("q", h.msgs(2))
    a, b = engine.receive(A("q"), 2)
    engine.dead_letter(A("q"), [a.lock_token], reason="bad", description="very")
    engine.abandon(A("q"), [b.lock_token])
    assert engine.counts("q").dead_letter == 0
    got = engine.peek(A("parking"), 0, 10)
    assert h.ids(got) == ["m0", "m1"]
    assert [m.dead_letter_reason for m in got] == ["bad", "MaxDeliveryCountExceeded"]
    assert {m.dead_letter_source for m in got} == {"q"}


def test_forward_dead_lettered_to_a_missing_entity_goes_to_transfer_dlq(engine: Engine, h: Helpers) -> None:
    engine.create_queue("q", forward_dead_lettered_to="nowhere")
    engine.send("q", h.msgs(1))
    (m,) = engine.receive(A("q"), 1)
    engine.dead_letter(A("q"), [m.lock_token], reason="bad")
    c = engine.counts("q")
    assert (c.dead_letter, c.transfer_dead_letter) == (0, 1)


def test_scheduled_messages_on_a_forwarding_queue_forward_when_due(engine: Engine, clock: Clock, h: Helpers) -> None:
    engine.create_queue("dest")
    engine.create_queue("src", forward_to="dest")
    engine.send("src", [OutboundMessage(body=b"x", message_id="later", scheduled_enqueue_time=clock.at(60))])
    assert engine.counts("src").scheduled == 1
    assert engine.counts("dest").active == 0
    clock.advance(60)
    # Nobody receives from a forwarding queue: the destination's receiver must see it.
    assert h.ids(engine.receive(A("dest"), 1)) == ["later"]
    assert engine.counts("src").scheduled == 0 and engine.counts("src").active == 0


def test_subscription_forward_to_a_queue(engine: Engine, h: Helpers) -> None:
    engine.create_queue("sink")
    engine.create_topic("t")
    engine.create_subscription("t", "fwd", forward_to="sink")
    engine.create_subscription("t", "keep")
    engine.send("t", h.msgs(1))
    assert engine.counts("t/Subscriptions/fwd").active == 0
    assert engine.counts("t/Subscriptions/keep").active == 1
    assert h.peek_ids("sink") == ["m0"]


def test_forward_to_a_topic_fans_out(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s1")
    engine.create_subscription("t", "s2")
    engine.create_queue("in", forward_to="t")
    engine.send("in", h.msgs(1))
    assert engine.counts("t/Subscriptions/s1").active == 1
    assert engine.counts("t/Subscriptions/s2").active == 1
