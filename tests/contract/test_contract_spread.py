"""resubmit --spread on every backend: copies scheduled, recorded, originals completed after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, OperationFailed, SendUnconfirmed
from sbdlq.operations.resubmit import resubmit
from sbdlq.operations.spread import SpreadOptions
from sbdlq.operations.spread_file import SpreadWriter, read_spread, spread_path
from sbdlq.operations.spread_ops import Place, cancel_spread, spread_status

if TYPE_CHECKING:
    from support import Seeder

Q = EntityPath("q")
DLQ = Address(Q, SubQueue.DEAD_LETTER)


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SBDLQ_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_spread_schedules_every_copy_in_sequence_order_and_records_it(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 9, prefix="m")
    result = aio(resubmit(backend, DLQ, Q, spread=SpreadOptions("9m", "1h"), concurrency=4))
    assert (result.selected, result.resubmitted, result.left_beside_copy) == (9, 9, 0)
    spread = result.spread
    assert spread is not None and spread["scheduled"] == 9 and spread["window_s"] == 540.0
    copies = spread["copies"]
    # In sequence order, a minute apart, from an hour ahead.
    assert [c["message_id"] for c in copies] == [f"m{i}" for i in range(9)]
    assert [c["seq"] for c in copies] == sorted(c["seq"] for c in copies)
    starts = [c["at"] for c in copies]
    assert starts == sorted(starts) and starts[0] == spread["start"]
    counts = aio(backend.counts(Q))
    assert (counts.dead_letter, counts.active, counts.scheduled) == (0, 0, 9)
    # Each number is the broker's: a peek by that number finds the copy, still scheduled.
    for c in copies:
        (m,) = aio(backend.peek(Address(Q), c["copy"], 1))
        assert (m.sequence_number, m.message_id, m.state) == (c["copy"], c["message_id"], "scheduled")
        assert m.scheduled_enqueue_time is not None and m.scheduled_enqueue_time.isoformat() == c["at"]
    # The record holds the same, and that the run finished.
    doc = read_spread(spread["id"])
    assert [c.to_json() for c in doc.copies] == copies
    assert doc.finished == {"resubmitted": 9, "left_beside_copy": 0, "failed": 0}
    assert doc.header["target"] == "q" and doc.header["planned"] == 9


def test_copies_of_one_second_share_a_schedule_and_each_keeps_its_number(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    seed.queue("q")
    seed.dead_letter("q", 9, prefix="m")
    result = aio(resubmit(backend, DLQ, Q, spread=SpreadOptions("3s", "1h")))
    assert result.spread is not None
    copies = result.spread["copies"]
    assert [c["at"] for c in copies] == [copies[0]["at"]] * 3 + [copies[3]["at"]] * 3 + [copies[6]["at"]] * 3
    assert len({c["copy"] for c in copies}) == 9
    by_number = {m.sequence_number: m for m in aio(backend.peek(Address(Q), 0, 20))}
    for c in copies:
        m = by_number[c["copy"]]
        assert (m.message_id, m.state) == (c["message_id"], "scheduled")
        assert m.scheduled_enqueue_time is not None and m.scheduled_enqueue_time.isoformat() == c["at"]


def test_spread_into_a_topic_passes_the_routing_check(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.topic("t", "a", "b")
    sub = Address(EntityPath("t", "a"), SubQueue.DEAD_LETTER)
    seed.dead_letter("t/Subscriptions/a", 2)
    with pytest.raises(BadInput, match="would also give copies"):
        aio(resubmit(backend, sub, EntityPath("t"), spread=SpreadOptions("1h")))
    assert seed.counts("t/Subscriptions/a").dead_letter == 2


@pytest.mark.parametrize(
    ("window", "start_at", "rate", "wanted"),
    [
        ("0s", None, None, "invalid --spread"),
        ("40d", None, None, "invalid --spread"),
        ("soon", None, None, "invalid --spread"),
        ("1h", None, 5.0, "contradict"),
        ("1h", "2001-01-01T00:00:00Z", None, "in the past"),
    ],
)
def test_bad_spread_options_are_refused_before_anything_moves(
    backend: Backend,
    seed: Seeder,
    aio: Any,
    state_dir: Path,
    window: str,
    start_at: str | None,
    rate: float | None,
    wanted: str,
) -> None:
    seed.queue("q")
    seed.dead_letter("q", 2)
    with pytest.raises(BadInput, match=wanted):
        aio(resubmit(backend, DLQ, Q, spread=SpreadOptions(window, start_at), rate=rate))
    assert seed.counts("q").dead_letter == 2
    assert not state_dir.exists()


def test_the_record_is_new_or_nothing_and_ids_name_no_path(state_dir: Path) -> None:
    path = spread_path("20260101T000000Z-abcdef")
    assert path.parent == state_dir / "spreads"
    path.parent.mkdir(parents=True)
    path.write_text("someone else's\n")
    with pytest.raises(OperationFailed, match="cannot create spread record"):
        SpreadWriter("20260101T000000Z-abcdef", {})
    assert path.read_text() == "someone else's\n"
    for bad in ("../../etc/passwd", "x", "20260101T000000Z-abcdef/.."):
        with pytest.raises(BadInput, match="not a spread id"):
            spread_path(bad)


def _spread_ten(backend: Backend, seed: Seeder, aio: Any) -> dict[str, Any]:
    """q's DLQ of m0..m9 spread over 10 minutes from now: m0 due at once, m1 in a minute, ..."""
    seed.queue("q")
    seed.dead_letter("q", 10, prefix="m")
    result = aio(resubmit(backend, DLQ, Q, spread=SpreadOptions("10m")))
    assert result.spread is not None and result.resubmitted == 10
    return result.spread


def test_status_counts_scheduled_and_active_copies_and_the_next_release(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    spread = _spread_ten(backend, seed, aio)
    status = aio(spread_status(backend, read_spread(spread["id"])))
    assert (status.recorded, status.cancelled, status.finished, status.checked) == (10, 0, True, True)
    # m0 is due at the window's start, which is now: active; the other nine wait a minute apart.
    assert (status.scheduled, status.became_active) == (9, 1)
    assert status.next_release is not None and status.next_release.isoformat() == spread["copies"][1]["at"]


def test_cancel_puts_every_copy_still_scheduled_in_the_file_first_and_loses_none(
    backend: Backend, seed: Seeder, aio: Any, tmp_path: Path
) -> None:
    spread = _spread_ten(backend, seed, aio)
    doc = read_spread(spread["id"])
    place = Place(backend, tmp_path / "held.jsonl", None)
    try:
        result = aio(cancel_spread(backend, doc, place))
    finally:
        place.close()
    # m0 is active, m1 falls due within the minute's margin (left to become active), m2..m9 cancelled.
    assert (len(result.cancelled), len(result.left_due), result.not_scheduled, result.also_active) == (8, 1, 1, [])
    exported = [json.loads(line)["message_id"] for line in (tmp_path / "held.jsonl").read_text().splitlines()]
    assert exported == [f"m{i}" for i in range(2, 10)]
    in_queue = seed.peek_ids("q")
    # Every message exactly once: active, still scheduled, or in the file.
    assert sorted(in_queue + exported) == sorted(f"m{i}" for i in range(10))
    assert seed.counts("q").scheduled == 1 and seed.counts("q").dead_letter == 0
    again = read_spread(spread["id"])
    assert sorted(again.cancelled) == sorted(result.cancelled)
    status = aio(spread_status(backend, again))
    assert (status.cancelled, status.scheduled, status.became_active) == (8, 1, 1)


def test_cancel_to_an_entity_sends_each_copy_there_first(backend: Backend, seed: Seeder, aio: Any) -> None:
    spread = _spread_ten(backend, seed, aio)
    seed.queue("held")
    place = Place(backend, None, "held")
    result = aio(cancel_spread(backend, read_spread(spread["id"]), place))
    assert len(result.cancelled) == 8 and result.place == "to held"
    held = seed.peek_ids("held")
    assert held == [f"m{i}" for i in range(2, 10)]
    assert sorted(seed.peek_ids("q") + held) == sorted(f"m{i}" for i in range(10))


def test_cancel_needs_one_place_and_refuses_the_spreads_own_target(
    backend: Backend, seed: Seeder, aio: Any, tmp_path: Path
) -> None:
    spread = _spread_ten(backend, seed, aio)
    for export, to in ((None, None), (tmp_path / "x.jsonl", "held")):
        with pytest.raises(BadInput, match="needs a place"):
            Place(backend, export, to)
    with pytest.raises(BadInput, match="own target"):
        aio(cancel_spread(backend, read_spread(spread["id"]), Place(backend, None, "q")))
    assert seed.counts("q").scheduled == 9


def test_a_spread_into_a_topic_fans_out_at_its_time_and_cannot_be_cancelled_blind(
    backend: Backend, seed: Seeder, aio: Any, tmp_path: Path
) -> None:
    seed.queue("q")
    seed.topic("t", "s")
    seed.dead_letter("q", 3, prefix="m")
    result = aio(resubmit(backend, DLQ, EntityPath("t"), spread=SpreadOptions("3m", "1h")))
    assert result.spread is not None and result.resubmitted == 3
    assert seed.counts("t/Subscriptions/s").active == 0 and seed.counts("q").dead_letter == 0
    doc = read_spread(result.spread["id"])
    status = aio(spread_status(backend, doc))
    assert (status.checked, status.scheduled, status.became_active) == (False, 3, 0)
    with pytest.raises(BadInput, match="cannot be read back"):
        aio(cancel_spread(backend, doc, Place(backend, tmp_path / "x.jsonl", None)))
    assert not (tmp_path / "x.jsonl").exists()


def test_a_record_that_cannot_be_written_stops_the_run_and_completes_no_unrecorded_original(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed.queue("q")
    seed.dead_letter("q", 12, prefix="m")
    calls = {"n": 0}
    real = SpreadWriter.record

    def disk_full_on_the_second_chunk(self: SpreadWriter, copies: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OperationFailed(f"cannot write spread record {self.path}: No space left on device")
        real(self, copies)

    monkeypatch.setattr(SpreadWriter, "record", disk_full_on_the_second_chunk)
    result = aio(resubmit(backend, DLQ, Q, spread=SpreadOptions("1h", "10m"), concurrency=4, batch_size=4))
    # The first chunk: recorded and completed. The second: scheduled, not recorded: its originals stay.
    assert (result.resubmitted, result.left_beside_copy, result.failed) == (4, 4, 0)
    assert result.not_tried == 4 and "No space left on device" in result.errors[0]
    assert result.spread is not None and result.spread["scheduled"] == 4
    assert seed.counts("q").scheduled == 8 and seed.counts("q").dead_letter == 8
    assert sorted(seed.dlq_ids("q")) == sorted(f"m{i}" for i in range(4, 12))


def test_a_schedule_without_an_answer_is_never_repeated_and_leaves_its_originals_beside_their_copy(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wire-truth rule for a schedule: the first request's answer is lost after the broker
    scheduled 3 of a chunk's 4 copies and confirmed 1. The confirmed one is recorded and its
    original completed; the 2 unanswered stay in the DLQ beside their copy, counted unconfirmed,
    never scheduled again; the one never sent is not sent on a link whose locks nothing proved
    (not tried, as a plain send's rest of a chunk); the run stops."""
    seed.queue("q")
    seed.dead_letter("q", 12, prefix="m")
    real = backend.schedule
    cut: list[str] = []

    async def answer_lost(entity: EntityPath, messages: Any, times: Any) -> list[int]:
        if cut:
            return await real(entity, messages, times)
        cut.extend(str(m.message_id) for m in messages)
        assert len(messages) == 4  # the first chunk
        numbers = await real(entity, messages[:3], times[:3])
        exc = SendUnconfirmed("schedule on q: no answer (connection reset)", sent=1, unknown=2)
        exc.sequence_numbers = tuple(numbers[:1])
        raise exc

    monkeypatch.setattr(backend, "schedule", answer_lost)
    result = aio(resubmit(backend, DLQ, Q, spread=SpreadOptions("1h", "10m"), concurrency=4, batch_size=4))
    doc = result.to_json()
    assert (doc["resubmitted"], doc["left_beside_copy"], doc["left_unconfirmed"], doc["failed"]) == (1, 2, 2, 0)
    assert doc["not_tried"] == 9 and any("may have reached q" in e for e in result.errors)
    # Scheduled once each: the confirmed copy and the two unanswered; no more.
    assert seed.counts("q").scheduled == 3 and seed.counts("q").dead_letter == 11
    assert set(cut[1:4]) <= set(seed.dlq_ids("q")) and cut[0] not in set(seed.dlq_ids("q"))
    # Every completed original has its copy in the record (spread cancel finds it); no other does.
    assert result.spread is not None
    recorded = [c["message_id"] for c in result.spread["copies"]]
    assert recorded == [cut[0]]
