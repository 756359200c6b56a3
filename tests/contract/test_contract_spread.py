"""resubmit --spread on every backend: copies scheduled, recorded, originals completed after."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, OperationFailed
from sbdlq.operations.resubmit import resubmit
from sbdlq.operations.spread import SpreadOptions
from sbdlq.operations.spread_file import SpreadWriter, read_spread, spread_path

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
    # The record holds the same, and that the run finished.
    doc = read_spread(spread["id"])
    assert [c.to_json() for c in doc.copies] == copies
    assert doc.finished == {"resubmitted": 9, "left_beside_copy": 0, "failed": 0}
    assert doc.header["target"] == "q" and doc.header["planned"] == 9


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
