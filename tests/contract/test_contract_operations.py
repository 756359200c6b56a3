"""The operations (peek, count, inspect-reason, resubmit, purge) on every backend."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support import ids

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, EntityNotFound
from sbdlq.models import ATTEMPT, RESUBMITTED_FROM, OutboundMessage
from sbdlq.operations.browse import count_entities, inspect_reasons, iter_messages
from sbdlq.operations.purge import purge
from sbdlq.operations.resubmit import resubmit
from sbdlq.selection import Selection, build_selection

if TYPE_CHECKING:
    from support import Seeder
    from support.spy import Spy

Q = EntityPath("q")
DLQ = Address(Q, SubQueue.DEAD_LETTER)


async def collect(it: Any) -> list[Any]:
    return [m async for m in it]


@pytest.fixture
def mixed(seed: Seeder) -> None:
    """q's DLQ: a0..a3 `Timeout`, b0..b2 `Poison`, c0..c1 `Timeout` again (sequence 1..9)."""
    seed.queue("q")
    seed.dead_letter("q", 4, reason="Timeout", description="took 30s", prefix="a", subject="orders")
    seed.dead_letter("q", 3, reason="Poison", description="bad json", prefix="b", application_properties={"t": "eu"})
    seed.dead_letter("q", 2, reason="Timeout", description="took 45s", prefix="c", subject="billing")


# ---------------------------------------------------------------- browse


def test_iter_messages_yields_matches_across_pages(backend: Backend, mixed: None, aio: Any) -> None:
    sel = build_selection(reasons=["timeout"])
    got = aio(collect(iter_messages(backend, DLQ, selection=sel, page_size=2)))
    assert ids(got) == ["a0", "a1", "a2", "a3", "c0", "c1"]


def test_iter_messages_from_sequence_and_limit(backend: Backend, mixed: None, aio: Any) -> None:
    got = aio(collect(iter_messages(backend, DLQ, from_sequence=3, limit=4, page_size=3)))
    assert [m.sequence_number for m in got] == [3, 4, 5, 6]


def test_a_sequence_range_reads_only_the_pages_it_needs(spy: Spy, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 60)
    sel = build_selection(sequences=["41-45"])
    got = aio(collect(iter_messages(spy, DLQ, selection=sel, page_size=10)))
    assert [m.sequence_number for m in got] == [41, 42, 43, 44, 45]
    # Pages from 41 cover it and show the end of the range: no scan from 0, no scan to the end.
    # Two of them: the first is small (LARGE_PAGE) until the body sizes are known.
    assert spy.calls.count("peek") == 2


def test_iter_messages_of_an_empty_dlq_yields_nothing(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    assert aio(collect(iter_messages(backend, DLQ))) == []


def test_count_entities_names_or_everything(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.dead_letter("q", 2)
    seed.topic("t", "s1", "s2")
    seed.dead_letter("t/Subscriptions/s1", 1)
    everything = [c.to_json() for c in aio(count_entities(backend, None))]
    # Topics have no DLQ of their own: every queue and subscription, no topic.
    assert [(c["entity"], c["active"], c["dead_letter"]) for c in everything] == [
        ("q", 0, 2),
        ("t/Subscriptions/s1", 0, 1),
        ("t/Subscriptions/s2", 1, 0),
    ]
    named = aio(count_entities(backend, [EntityPath("t", "s1")]))
    assert [(c.entity, c.dead_letter) for c in named] == [("t/Subscriptions/s1", 1)]
    with pytest.raises(EntityNotFound):
        aio(count_entities(backend, [EntityPath("nope")]))


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ("reason", [("Timeout", 6, [1, 2, 3, 4, 8]), ("Poison", 3, [5, 6, 7])]),
        ("description", [("took 30s", 4, [1, 2, 3, 4]), ("bad json", 3, [5, 6, 7]), ("took 45s", 2, [8, 9])]),
        ("subject", [("orders", 4, [1, 2, 3, 4]), ("(none)", 3, [5, 6, 7]), ("billing", 2, [8, 9])]),
        ("property:t", [("(none)", 6, [1, 2, 3, 4, 8]), ("eu", 3, [5, 6, 7])]),
        ("source", [("(none)", 9, [1, 2, 3, 4, 5])]),
    ],
)
def test_inspect_reasons_groups(
    backend: Backend, mixed: None, aio: Any, by: str, expected: list[tuple[str, int, list[int]]]
) -> None:
    groups = aio(inspect_reasons(backend, DLQ, by=by))
    assert [(g.key, g.count, g.sample_sequence_numbers) for g in groups] == expected
    for g in groups:
        assert g.first_enqueued is not None and g.last_enqueued is not None
        assert g.first_enqueued <= g.last_enqueued


def test_inspect_reasons_by_time_buckets_in_time_order(backend: Backend, mixed: None, aio: Any) -> None:
    now = datetime.now(UTC)
    day = aio(inspect_reasons(backend, DLQ, by="day"))
    hour = aio(inspect_reasons(backend, DLQ, by="Hour"))
    # All seeded within this test: one bucket (a run across midnight could make two).
    assert sum(g.count for g in day) == 9 and sum(g.count for g in hour) == 9
    assert day[-1].key == now.strftime("%Y-%m-%d")
    assert hour[-1].key == now.strftime("%Y-%m-%dT%H:00Z")
    assert [g.key for g in hour] == sorted(g.key for g in hour)


def test_inspect_reasons_with_a_selection_and_a_bad_grouping(backend: Backend, mixed: None, aio: Any) -> None:
    sel = build_selection(subject="billing")
    groups = aio(inspect_reasons(backend, DLQ, by="description", selection=sel))
    assert [(g.key, g.count) for g in groups] == [("took 45s", 2)]
    with pytest.raises(BadInput):
        aio(inspect_reasons(backend, DLQ, by="property:"))


# ---------------------------------------------------------------- resubmit


def test_resubmit_everything_moves_every_message_once(backend: Backend, mixed: None, seed: Seeder, aio: Any) -> None:
    notes: list[str] = []
    r = aio(resubmit(backend, DLQ, Q, note=notes.append, batch_size=4, concurrency=3))
    assert (r.selected, r.resubmitted, r.failed, r.not_matching, r.dry_run) == (9, 9, 0, 0, False)
    assert seed.dlq("q") == []
    assert sorted(ids(seed.active("q"))) == sorted(["a0", "a1", "a2", "a3", "b0", "b1", "b2", "c0", "c1"])
    assert notes == ["plan: resubmit 9 message(s) from q/$DeadLetterQueue to q"]


def test_resubmit_a_selection_moves_exactly_the_matches(backend: Backend, mixed: None, seed: Seeder, aio: Any) -> None:
    r = aio(resubmit(backend, DLQ, Q, selection=build_selection(reasons=["POISON"]), batch_size=2))
    assert (r.selected, r.resubmitted, r.failed) == (3, 3, 0)
    assert ids(seed.active("q")) == ["b0", "b1", "b2"]
    assert ids(seed.dlq("q")) == ["a0", "a1", "a2", "a3", "c0", "c1"]


def test_resubmit_max_bounds_the_run(backend: Backend, mixed: None, seed: Seeder, aio: Any) -> None:
    r = aio(resubmit(backend, DLQ, Q, max_count=4, batch_size=3))
    assert (r.selected, r.resubmitted) == (4, 4)
    assert ids(seed.active("q")) == ["a0", "a1", "a2", "a3"]
    r = aio(resubmit(backend, DLQ, Q, max_count=1, selection=build_selection(reasons=["Timeout"])))
    assert (r.selected, r.resubmitted) == (1, 1)
    assert ids(seed.active("q"))[-1] == "c0"
    assert len(seed.dlq("q")) == 4


def test_resubmit_to_another_queue_with_new_ids_and_kept_dead_letter_properties(
    backend: Backend, mixed: None, seed: Seeder, aio: Any
) -> None:
    seed.queue("retry")
    sel = build_selection(sequences=["8-9"])
    r = aio(
        resubmit(
            backend, DLQ, EntityPath("retry"), selection=sel, new_message_id=True, keep_dead_letter_properties=True
        )
    )
    assert r.resubmitted == 2
    copies = seed.active("retry")
    assert [m.body for m in copies] == [b"c0", b"c1"]
    assert all(m.message_id not in ("c0", "c1") for m in copies)
    assert len({m.message_id for m in copies}) == 2
    assert copies[0].application_properties == {
        "DeadLetterReason": "Timeout",
        "DeadLetterErrorDescription": "took 45s",
        RESUBMITTED_FROM: "q/$DeadLetterQueue:8",
        ATTEMPT: 1,
    }


def test_resubmit_to_a_missing_target_or_a_subscription_is_refused(
    backend: Backend, mixed: None, seed: Seeder, aio: Any
) -> None:
    seed.topic("t", "s")
    with pytest.raises(EntityNotFound):
        aio(resubmit(backend, DLQ, EntityPath("missing")))
    with pytest.raises(BadInput):
        aio(resubmit(backend, DLQ, EntityPath("t", "s")))
    assert len(seed.dlq("q")) == 9


def test_resubmit_from_the_transfer_dlq(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.transfer_dead_letter("fwd", 3)
    seed.queue("elsewhere")
    tdlq = Address(EntityPath("fwd"), SubQueue.TRANSFER_DEAD_LETTER)
    r = aio(resubmit(backend, tdlq, EntityPath("elsewhere")))
    assert r.resubmitted == 3
    assert ids(seed.active("elsewhere")) == ["x0", "x1", "x2"]
    assert seed.active("elsewhere")[0].application_properties[RESUBMITTED_FROM] == "fwd/$Transfer/$DeadLetterQueue:1"
    assert seed.counts("fwd").transfer_dead_letter == 0


# ---------------------------------------------------------------- purge


def test_purge_everything(backend: Backend, mixed: None, seed: Seeder, aio: Any) -> None:
    notes: list[str] = []
    r = aio(purge(backend, DLQ, note=notes.append, batch_size=4))
    assert (r.selected, r.purged, r.exported, r.dry_run) == (9, 9, 0, False)
    assert seed.dlq("q") == []
    assert notes == ["plan: delete 9 message(s) from q/$DeadLetterQueue"]


def test_purge_a_selection_and_max(backend: Backend, mixed: None, seed: Seeder, aio: Any) -> None:
    r = aio(purge(backend, DLQ, selection=build_selection(description_contains="TOOK"), max_count=5, batch_size=2))
    assert (r.selected, r.purged) == (5, 5)
    assert ids(seed.dlq("q")) == ["b0", "b1", "b2", "c1"]
    r = aio(purge(backend, DLQ, max_count=2))
    assert r.purged == 2
    assert ids(seed.dlq("q")) == ["b2", "c1"]


def test_purge_older_than_spares_recent_messages(backend: Backend, mixed: None, seed: Seeder, aio: Any) -> None:
    r = aio(purge(backend, DLQ, selection=build_selection(older_than="1h")))
    assert (r.selected, r.purged) == (0, 0)
    sel = build_selection(older_than="1h", now=datetime.now(UTC) + timedelta(hours=2))
    assert aio(purge(backend, DLQ, selection=sel)).purged == 9


def test_purge_with_export_writes_each_message_before_deleting(
    backend: Backend, mixed: None, seed: Seeder, aio: Any, tmp_path: Path
) -> None:
    before = {m.message_id: m.to_json() for m in seed.dlq("q")}
    out = tmp_path / "dlq.jsonl"
    r = aio(purge(backend, DLQ, export=out, selection=build_selection(reasons=["Timeout"]), batch_size=4))
    assert (r.selected, r.purged, r.exported) == (6, 6, 6)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [d["message_id"] for d in lines] == ["a0", "a1", "a2", "a3", "c0", "c1"]
    for d in lines:
        # What a peek showed, bar the delivery the purge itself made, then marked deleted.
        assert d.pop("sbdlq_deleted") == 1
        assert {**d, "delivery_count": 0} == {**before[d["message_id"]], "delivery_count": 0}
    assert ids(seed.dlq("q")) == ["b0", "b1", "b2"]


def test_purge_of_an_empty_dlq_makes_no_export_file(backend: Backend, seed: Seeder, aio: Any, tmp_path: Path) -> None:
    """Nothing deleted, no file (issue 34 item 7); a dry run makes none either."""
    seed.queue("q")
    assert aio(purge(backend, DLQ, export=tmp_path / "dry.jsonl", dry_run=True)).selected == 0
    assert not (tmp_path / "dry.jsonl").exists()
    r = aio(purge(backend, DLQ, export=tmp_path / "x.jsonl"))
    assert (r.selected, r.purged) == (0, 0)
    assert not (tmp_path / "x.jsonl").exists()


def test_purge_of_the_transfer_dlq_leaves_the_dlq(backend: Backend, seed: Seeder, aio: Any, engine: Any) -> None:
    seed.queue("fwd")
    seed.dead_letter("fwd", 1)
    engine.create_queue("fwd", exist_ok=True, forward_to="nowhere")
    seed.send("fwd", seed.msgs(3, "x"))
    r = aio(purge(backend, Address(EntityPath("fwd"), SubQueue.TRANSFER_DEAD_LETTER)))
    assert r.purged == 3
    c = seed.counts("fwd")
    assert (c.transfer_dead_letter, c.dead_letter) == (0, 1)


def test_empty_selection_is_the_fast_path(spy: Spy, mixed: None, aio: Any) -> None:
    aio(purge(spy, DLQ, selection=Selection()))
    # Receive-and-delete: no scan, no settlement calls.
    assert "peek" not in spy.calls and "complete" not in spy.calls


def test_resubmit_of_a_message_the_target_is_too_small_for_keeps_the_original(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    """A 300 KB dead letter from a 1 MB queue resubmitted to a 256 KB one: refused, never lost."""
    seed.queue("large", max_message_size_kb=1024)
    seed.dead_letter("large", [OutboundMessage(body=b"x" * 300_000, message_id="big")])
    seed.dead_letter("large", [OutboundMessage(body=b"small", message_id="small")])
    seed.queue("standard")
    r = aio(resubmit(backend, Address(EntityPath("large"), SubQueue.DEAD_LETTER), EntityPath("standard")))
    assert (r.selected, r.resubmitted, r.failed) == (2, 1, 1)
    assert ids(seed.active("standard")) == ["small"]
    assert ids(seed.dlq("large")) == ["big"]
