"""send_and_complete and move_available: the emulator's two moves in one transaction.

What resubmit on the emulator rests on (issue 17): both happen or neither; the copies go
through every rule of a send; the copy of an original whose lock was lost is not sent; a
move without locks takes only what a receive could, leaves what it did not choose untouched.
Also: peek pages in sequence order across states, and the row → Message mapping.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine
from sbdlq.emulator.engine.errors import EntityIsDisabled, MessageTooLarge
from sbdlq.emulator.engine.rows import MessageRow, to_message
from sbdlq.models import Message, OutboundMessage

if TYPE_CHECKING:
    from conftest import Clock, Helpers

DLQ = A("q/$DeadLetterQueue")


@pytest.fixture
def q(engine: Engine, h: Helpers) -> Engine:
    """q with m0..m2 in its DLQ (lock 30 s); an empty `retry`."""
    engine.create_queue("q", lock_duration_s=30)
    engine.create_queue("retry")
    h.dead_letter("q", 3)
    return engine


def _copies(messages: list[Message], **fields_: object) -> list[OutboundMessage]:
    return [OutboundMessage(body=m.body, message_id=m.message_id, **fields_) for m in messages]  # type: ignore[arg-type]


def _tokens(messages: list[Message]) -> list[str]:
    return [m.lock_token or "" for m in messages]


def test_copies_sent_and_originals_completed_together(q: Engine, h: Helpers) -> None:
    got = q.receive(DLQ, 10)
    assert q.send_and_complete("retry", _copies(got), DLQ, _tokens(got)) == []
    assert h.ids(h.active("retry")) == ["m0", "m1", "m2"]
    assert h.dlq("q") == []


def test_a_copy_over_the_size_limit_leaves_every_original_and_sends_nothing(q: Engine, h: Helpers) -> None:
    q.create_queue("small", max_message_size_kb=1)
    got = q.receive(DLQ, 10)
    copies = _copies(got)
    copies[1].body = b"x" * 2048
    with pytest.raises(MessageTooLarge):
        q.send_and_complete("small", copies, DLQ, _tokens(got))
    assert h.active("small") == []
    # Nothing half done: none completed, and the locks are still held (the caller releases them).
    assert h.ids(h.dlq("q")) == ["m0", "m1", "m2"]
    assert q.renew_locks(DLQ, _tokens(got)).keys() == set(_tokens(got))


def test_a_disabled_target_leaves_every_original(q: Engine, h: Helpers) -> None:
    q.set_status("retry", "Disabled")
    got = q.receive(DLQ, 10)
    with pytest.raises(EntityIsDisabled):
        q.send_and_complete("retry", _copies(got), DLQ, _tokens(got))
    q.set_status("retry", "Active")
    assert h.active("retry") == []
    assert h.ids(h.dlq("q")) == ["m0", "m1", "m2"]


def test_the_copy_of_an_original_whose_lock_was_lost_is_not_sent(q: Engine, h: Helpers, clock: Clock) -> None:
    got = q.receive(DLQ, 10)
    clock.advance(20)
    q.renew_locks(DLQ, [got[0].lock_token or ""])
    clock.advance(15)  # m1's and m2's locks lapsed; m0's was renewed
    lost = q.send_and_complete("retry", _copies(got), DLQ, _tokens(got))
    assert lost == _tokens(got)[1:]
    assert h.ids(h.active("retry")) == ["m0"]
    assert h.ids(h.dlq("q")) == ["m1", "m2"]


def test_copies_follow_the_targets_forwarding(q: Engine, h: Helpers) -> None:
    q.create_queue("final")
    q.create_queue("hop", forward_to="final")
    got = q.receive(DLQ, 10)
    assert q.send_and_complete("hop", _copies(got, subject="again"), DLQ, _tokens(got)) == []
    assert h.active("hop") == []
    assert [(m.message_id, m.subject) for m in h.active("final")] == [("m0", "again"), ("m1", "again"), ("m2", "again")]


def test_copies_take_the_targets_ttl_ceiling(q: Engine, h: Helpers) -> None:
    q.create_queue("short", default_ttl_s=60)
    got = q.receive(DLQ, 1)
    q.send_and_complete("short", _copies(got, time_to_live_s=3600), DLQ, _tokens(got))
    (copy,) = h.active("short")
    assert copy.time_to_live_s == 60


def _all(batch: list[Message]) -> list[tuple[Message, OutboundMessage]]:
    return list(zip(batch, _copies(batch), strict=True))


def test_move_available_moves_what_is_chosen_and_leaves_the_rest_untouched(q: Engine, h: Helpers) -> None:
    before = {m.message_id: m.delivery_count for m in h.dlq("q")}
    seen: list[tuple[str | None, int]] = []

    def only_m1(batch: list[Message]) -> list[tuple[Message, OutboundMessage]]:
        seen.extend((m.message_id, m.delivery_count) for m in batch)
        return [p for p in _all(batch) if p[0].message_id == "m1"]

    moved = q.move_available(DLQ, "retry", after_sequence=-1, max_count=10, choose=only_m1)
    # Seen as a receive sees them (this delivery counted), but only m1 moved.
    assert seen == [(i, before[i] + 1) for i in ("m0", "m1", "m2")]
    assert (moved.read, moved.moved) == (3, 1)
    assert moved.last_sequence == h.dlq("q")[-1].sequence_number
    assert h.ids(h.active("retry")) == ["m1"]
    # The others were never locked, and their delivery count is what it was.
    assert [(m.message_id, m.delivery_count, m.locked_until) for m in h.dlq("q")] == [
        ("m0", before["m0"], None),
        ("m2", before["m2"], None),
    ]
    assert h.ids(q.receive(DLQ, 10)) == ["m0", "m2"]


def test_move_available_reads_after_the_cursor_and_up_to_max_count(q: Engine, h: Helpers) -> None:
    first = h.dlq("q")[0].sequence_number
    moved = q.move_available(DLQ, "retry", after_sequence=first, max_count=1, choose=_all)
    assert (moved.read, moved.moved) == (1, 1)
    assert h.ids(h.active("retry")) == ["m1"]
    empty = q.move_available(DLQ, "retry", after_sequence=10**9, max_count=10, choose=_all)
    assert (empty.read, empty.moved, empty.last_sequence) == (0, 0, 10**9)


def test_move_available_skips_messages_another_receiver_holds(q: Engine, h: Helpers, clock: Clock) -> None:
    held = q.receive(DLQ, 1)  # m0, locked by someone else
    moved = q.move_available(DLQ, "retry", after_sequence=-1, max_count=10, choose=_all)
    assert moved.moved == 2
    assert h.ids(h.active("retry")) == ["m1", "m2"]
    assert h.ids(h.dlq("q")) == ["m0"]
    # Once that lock lapses, m0 is available to a move again.
    clock.advance(31)
    assert q.move_available(DLQ, "retry", after_sequence=-1, max_count=10, choose=_all).moved == 1
    assert held[0].message_id == "m0"
    assert h.ids(h.active("retry")) == ["m1", "m2", "m0"]


def test_move_available_refused_copy_moves_nothing(q: Engine, h: Helpers) -> None:
    q.create_queue("small", max_message_size_kb=1)
    before = [(m.message_id, m.delivery_count, m.locked_until) for m in h.dlq("q")]

    def one_too_big(batch: list[Message]) -> list[tuple[Message, OutboundMessage]]:
        pairs = _all(batch)
        pairs[1][1].body = b"x" * 2048
        return pairs

    with pytest.raises(MessageTooLarge):
        q.move_available(DLQ, "small", after_sequence=-1, max_count=10, choose=one_too_big)
    assert h.active("small") == []
    assert [(m.message_id, m.delivery_count, m.locked_until) for m in h.dlq("q")] == before


def test_move_available_choose_raising_moves_nothing(q: Engine, h: Helpers) -> None:
    def broken(batch: list[Message]) -> list[tuple[Message, OutboundMessage]]:
        raise RuntimeError("edit failed")

    with pytest.raises(RuntimeError):
        q.move_available(DLQ, "retry", after_sequence=-1, max_count=10, choose=broken)
    assert h.active("retry") == []
    assert h.ids(h.dlq("q")) == ["m0", "m1", "m2"]


def test_move_available_refuses_a_main_queue(q: Engine) -> None:
    with pytest.raises(ValueError, match="expire"):
        q.move_available(A("q"), "retry", after_sequence=-1, max_count=10, choose=_all)


def test_peek_pages_through_every_state_in_sequence_order(engine: Engine, h: Helpers, clock: Clock) -> None:
    engine.create_queue("q")
    later = clock.at(3600)
    # seq 1..6: active, scheduled, active, deferred, scheduled, active
    engine.send("q", h.msgs(1, start=0))
    engine.send("q", h.msgs(1, start=1, scheduled_enqueue_time=later))
    engine.send("q", h.msgs(2, start=2))
    engine.send("q", h.msgs(1, start=4, scheduled_enqueue_time=later))
    engine.send("q", h.msgs(1, start=5))
    got = engine.receive(A("q"), 2)  # m0, m2
    engine.defer(A("q"), [got[1].lock_token or ""])  # m2 deferred
    engine.complete(A("q"), [got[0].lock_token or ""])  # m0 gone
    seen: list[tuple[int, str | None, str]] = []
    start = 0
    while page := engine.peek(A("q"), start, 2):
        seen += [(m.sequence_number, m.message_id, m.state) for m in page]
        start = page[-1].sequence_number + 1
    assert seen == [
        (2, "m1", "scheduled"),
        (3, "m2", "deferred"),
        (4, "m3", "active"),
        (5, "m4", "scheduled"),
        (6, "m5", "active"),
    ]


def test_a_row_becomes_the_message_field_by_field() -> None:
    """to_message builds Message positionally: each column must land in its own field."""
    row = MessageRow(
        id=1, seq=2, state=1, message_id="mid", session_id="sid", correlation_id="cid", subject="subj",
        content_type="ct", reply_to="rt", reply_to_session_id="rtsid", to_="to", partition_key="pk", ttl_ms=5000,
        enqueued_ms=1_000_000, expires_ms=1_005_000, scheduled_ms=900_000, delivery_count=3, lock_token="tok",
        locked_until_ms=2_000_000, dl_source="src", hops=1, props='{"k":"v"}', body=b"body", body_type="value",
        amqp=b"sections",
    )  # fmt: skip
    m = to_message(row, delivered=True)
    expected = {
        "sequence_number": 2, "body": b"body", "message_id": "mid", "delivery_count": 4, "subject": "subj",
        "correlation_id": "cid", "content_type": "ct", "session_id": "sid", "reply_to": "rt",
        "reply_to_session_id": "rtsid", "to": "to", "partition_key": "pk", "time_to_live_s": 5.0,
        "application_properties": {"k": "v"}, "dead_letter_source": "src", "state": "deferred", "lock_token": None,
        "locked_until": None, "body_type": "value", "amqp": b"sections",
    }  # fmt: skip
    for name, value in expected.items():
        assert getattr(m, name) == value, name
    assert m.enqueued_time.timestamp() == 1000.0
    assert m.expires_at is not None and m.expires_at.timestamp() == 1005.0
    assert m.scheduled_enqueue_time is not None and m.scheduled_enqueue_time.timestamp() == 900.0
    assert {f.name for f in fields(Message)} == {*expected, "enqueued_time", "expires_at", "scheduled_enqueue_time"}
