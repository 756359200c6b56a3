"""kill -9 during `replay` loses nothing and `--resume` resends at most --concurrency lines per kill.

The real `sbdlq replay` runs in a subprocess and is killed at seeded random moments; each run
after the first adds --resume. Every record must arrive, and each kill may add at most
--concurrency duplicates (the chunk whose lines had not reached the state file).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from support import stored_ids
from support.process import run_or_kill, sbdlq_env

from sbdlq.emulator.engine import Engine

pytestmark = pytest.mark.slow

N = 2000
KILLS = 8
CONCURRENCY = 8


def _run(argv: list[str], store: Path, kill_after: float | None) -> int | None:
    return run_or_kill(argv, sbdlq_env(store, SBDLQ_EMULATOR_LATENCY="10ms"), kill_after)


def _arrived(store: Path) -> Counter[str]:
    return Counter(stored_ids(store, "retry"))


def test_a_killed_replay_resumes_without_loss_and_with_bounded_duplicates(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    Engine(store).create_queue("retry")
    records = tmp_path / "dlq.jsonl"
    with records.open("w") as f:
        for i in range(N):
            f.write(json.dumps({"sequence_number": i + 1, "message_id": f"m-{i}", "body": f"order {i}"}) + "\n")
    base = ["replay", str(records), "--to", "retry", "--concurrency", str(CONCURRENCY)]
    rng = random.Random("sbdlq-replay-resume")
    killed = 0
    previous_dups = 0
    for k in range(KILLS):
        rc = _run(base + (["--resume"] if k else []), store, kill_after=rng.uniform(0.6, 1.2))
        killed += rc is None
        dups = sum(_arrived(store).values()) - len(_arrived(store))
        assert dups - previous_dups <= CONCURRENCY, f"kill {k}: {dups - previous_dups} new duplicates"
        previous_dups = dups
        if rc is not None:
            break
    assert killed >= 2, "the kill window is wrong: runs were not killed mid-way"
    _run([*base, "--resume"], store, kill_after=None)
    arrived = _arrived(store)
    assert set(arrived) == {f"m-{i}" for i in range(N)}
    assert sum(arrived.values()) - N <= killed * CONCURRENCY
    assert records.with_name("dlq.jsonl.replay-state").read_text().endswith("finished\n")
    # Rounds after the replay finished send nothing: the bound is per kill, not per round.
    for _ in range(3):
        assert _run([*base, "--resume"], store, kill_after=None) == 0
    assert _arrived(store) == arrived
