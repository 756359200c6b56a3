"""Repair and replay (issue 15) on every backend: the copies that reach the broker carry the edits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from support import ids

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.models import ATTEMPT, RESUBMITTED_FROM
from sbdlq.operations.edits import build_edits
from sbdlq.operations.replay import ReplayOptions, replay
from sbdlq.operations.resubmit import resubmit
from sbdlq.selection import build_selection

if TYPE_CHECKING:
    from support import Seeder

EDITS = build_edits(set_property=["tenant=us", "n=7"], remove_property=["v"], system={"subject": "fixed"})


def test_resubmit_sends_edited_copies(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.queue("retry")
    seed.dead_letter("q", 2, application_properties={"tenant": "eu", "v": 1})
    r = aio(resubmit(backend, Address(EntityPath("q"), SubQueue.DEAD_LETTER), EntityPath("retry"), edits=EDITS))
    assert (r.selected, r.resubmitted) == (2, 2)
    copies = seed.active("retry")
    assert [(m.subject, m.application_properties) for m in copies] == [
        ("fixed", {"tenant": "us", "n": 7, RESUBMITTED_FROM: f"q/$DeadLetterQueue:{n}", ATTEMPT: 1}) for n in (1, 2)
    ]


def test_replay_sends_the_selected_records_with_edits_and_records_them(
    backend: Backend, seed: Seeder, aio: Any, tmp_path: Path
) -> None:
    seed.queue("retry")
    path = tmp_path / "r.jsonl"
    rows = [
        {"sequence_number": i, "message_id": f"r{i}", "body": "x", "application_properties": {"v": i}}
        for i in range(1, 6)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
    state = tmp_path / "r.state"
    options = ReplayOptions(selection=build_selection(sequences=["2-4"]), concurrency=2, edits=EDITS, state=state)
    r = aio(replay(backend, path, EntityPath("retry"), options))
    assert (r.selected, r.replayed, r.failed, r.not_matching) == (3, 3, 0, 2)
    assert ids(seed.active("retry")) == ["r2", "r3", "r4"]
    assert seed.active("retry")[0].application_properties == {
        "tenant": "us",
        "n": 7,
        RESUBMITTED_FROM: "r.jsonl:2",
        ATTEMPT: 1,
    }
    assert state.read_text().endswith("finished\n")  # kept: a --resume now sends nothing
