"""Application dead-lettering, what the DLQ allows, header size, bulk dead-lettering."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine
from sbdlq.errors import InvalidOperation
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from conftest import Clock, Helpers

Q = A("q")
DLQ = A("q/$DeadLetterQueue")
TDLQ = A("q/$Transfer/$DeadLetterQueue")


@pytest.fixture
def q(engine: Engine) -> Engine:
    engine.create_queue("q", lock_duration_s=30)
    return engine


def test_application_dead_letter_with_reason_and_description(q: Engine, h: Helpers) -> None:
    q.send("q", [OutboundMessage(body=b"x", message_id="m", application_properties={"tenant": "eu"})])
    (m,) = q.receive(Q, 1)
    assert q.dead_letter(Q, [m.lock_token], reason="BadPayload", description="missing field 'id'") == []
    c = q.counts("q")
    assert (c.active, c.dead_letter) == (0, 1)
    (d,) = q.peek(DLQ, 0, 1)
    assert d.dead_letter_reason == "BadPayload"
    assert d.dead_letter_error_description == "missing field 'id'"
    assert d.application_properties["tenant"] == "eu"
    assert d.sequence_number == m.sequence_number and d.body == b"x"


def test_dead_letter_without_reason_sets_none(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    q.dead_letter(Q, [m.lock_token])
    (d,) = q.peek(DLQ, 0, 1)
    assert d.dead_letter_reason is None and d.dead_letter_error_description is None


def test_dead_letter_with_properties(q: Engine, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    q.dead_letter(Q, [m.lock_token], reason="r", properties={"stage": 3})
    (d,) = q.peek(DLQ, 0, 1)
    assert d.application_properties == {"stage": 3, "DeadLetterReason": "r"}


def test_dead_letter_with_a_lost_lock(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    clock.advance(30)
    assert q.dead_letter(Q, [m.lock_token], reason="r") == [m.lock_token]
    assert q.counts("q").dead_letter == 0


@pytest.mark.parametrize("sub_queue", [DLQ, TDLQ])
def test_dead_lettering_a_dlq_message_is_refused(q: Engine, h: Helpers, sub_queue) -> None:  # type: ignore[no-untyped-def]
    q.send("q", h.msgs(1))
    (m,) = q.receive(Q, 1)
    q.dead_letter(Q, [m.lock_token], reason="r")
    (d,) = q.receive(DLQ, 1)
    with pytest.raises(InvalidOperation):
        q.dead_letter(sub_queue, [d.lock_token], reason="again")
    assert q.counts("q").dead_letter == 1


def test_dlq_supports_peek_lock_complete_and_abandon(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", h.msgs(3))
    got = q.receive(Q, 3)
    q.dead_letter(Q, [m.lock_token for m in got], reason="r")
    first = q.receive(DLQ, 1)
    assert first[0].lock_token and first[0].locked_until == clock.at(30)
    rest = q.receive(DLQ, 5)
    assert h.ids(rest) == ["m1", "m2"]  # the first is locked
    q.abandon(DLQ, [m.lock_token for m in rest])
    # No MaxDeliveryCount in the DLQ: abandon as often as you like.
    for _ in range(15):
        (d,) = q.receive(DLQ, 1)
        assert d.message_id == "m1"
        q.abandon(DLQ, [d.lock_token])
    clock.advance(31)  # the first lock lapses
    all3 = q.receive(DLQ, 5)
    assert h.ids(all3) == ["m0", "m1", "m2"]
    assert q.complete(DLQ, [all3[0].lock_token]) == []
    assert h.peek_ids("q/$DeadLetterQueue") == ["m1", "m2"]
    assert q.counts("q").dead_letter == 2


def test_dlq_renew_and_receive_and_delete(q: Engine, clock: Clock, h: Helpers) -> None:
    from sbdlq.backends.base import ReceiveMode

    q.send("q", h.msgs(2))
    got = q.receive(Q, 2)
    q.dead_letter(Q, [m.lock_token for m in got])
    (d,) = q.receive(DLQ, 1)
    clock.advance(20)
    assert q.renew_locks(DLQ, [d.lock_token]) == {d.lock_token: clock.at(30)}
    assert h.ids(q.receive(DLQ, 5, mode=ReceiveMode.RECEIVE_AND_DELETE)) == ["m1"]
    assert q.counts("q").dead_letter == 1


def test_no_automatic_cleanup_of_the_dlq(q: Engine, clock: Clock, h: Helpers) -> None:
    q.send("q", [OutboundMessage(body=b"x", message_id="m", time_to_live_s=1)])
    (m,) = q.receive(Q, 1)
    q.dead_letter(Q, [m.lock_token])
    clock.advance(86400 * 400)
    q.receive(Q, 10)  # an active receiver on the main queue doesn't touch the DLQ
    assert q.counts("q").dead_letter == 1
    assert h.peek_ids("q/$DeadLetterQueue") == ["m"]


def test_headers_over_64k_go_to_the_dlq(q: Engine) -> None:
    big = "x" * (64 * 1024 + 1)
    seqs = q.send(
        "q",
        [
            OutboundMessage(body=b"ok", message_id="small", application_properties={"p": "y" * 1000}),
            OutboundMessage(body=b"big", message_id="big", application_properties={"p": big}),
        ],
    )
    assert len(seqs) == 2  # the send itself succeeds
    c = q.counts("q")
    assert (c.active, c.dead_letter) == (1, 1)
    (d,) = q.peek(DLQ, 0, 1)
    assert d.message_id == "big"
    assert d.dead_letter_reason == "HeaderSizeExceeded"
    assert d.dead_letter_error_description == "The size quota for this stream has been exceeded."
    assert d.application_properties["p"] == big


def test_header_size_counts_keys_and_binary_values(q: Engine) -> None:
    props: dict[str, object] = {f"k{i:05d}" + "_" * 60: b"\x00" * 100 for i in range(450)}
    q.send("q", [OutboundMessage(body=b"", application_properties=props)])
    assert q.counts("q").dead_letter == 1


def test_a_big_body_is_not_a_big_header(q: Engine) -> None:
    q.send("q", [OutboundMessage(body=b"x" * 200_000)])
    assert q.counts("q").active == 1


def test_bulk_dead_letter_and_abandon_are_fast(engine: Engine, h: Helpers) -> None:
    engine.create_queue("bulk", max_delivery_count=1)
    n = 5000
    engine.send("bulk", h.msgs(n))
    got = engine.receive(A("bulk"), n)
    # Fast means in bulk: a few statements per chunk of messages, never one per message (what
    # the clock measured before, and a busy machine's clock cannot measure).
    statements: list[str] = []
    engine.store.conn.set_trace_callback(statements.append)
    half = n // 2
    engine.dead_letter(A("bulk"), [m.lock_token for m in got[:half]], reason="bulk", description="d")
    engine.abandon(A("bulk"), [m.lock_token for m in got[half:]])  # past MaxDeliveryCount of 1
    engine.store.conn.set_trace_callback(None)
    c = engine.counts("bulk")
    assert (c.active, c.dead_letter) == (0, n)
    reasons = {m.dead_letter_reason for m in engine.peek(A("bulk/$DeadLetterQueue"), 0, n)}
    assert reasons == {"bulk", "MaxDeliveryCountExceeded"}
    assert len(statements) < n / 50, statements
