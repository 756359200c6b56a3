"""Two operators at once: two processes on the same DLQ move each message exactly once."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from support import dead_lettered_store, stored_ids
from support.process import GATE, GATED, gate_env, sbdlq_env, start_sbdlq, wait_for_line

pytestmark = pytest.mark.slow
N = 1500
GUARD_S = 120  # a hang guard for each wait on a process, not a speed bound


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """N messages `m-<i>` in the DLQ of `orders`; an empty `retry`."""
    return dead_lettered_store(tmp_path / "store.db", N, "Twice")


def _start(store: Path, args: list[str], latency: str = "2ms", **gate: str) -> subprocess.Popen[str]:
    env = sbdlq_env(store, SBDLQ_EMULATOR_LATENCY=latency) if latency else sbdlq_env(store)
    return start_sbdlq(args, {**env, **gate}, script=GATED if gate else None)


# With latency the emulator stands in for a namespace: the locked loop, a batch of 5 per
# receive. Without it a resubmit moves without locks, a transaction per batch: --batch-size 1
# and a DLQ 20 times bigger keep both processes at work at once once both run.
@pytest.mark.parametrize(("latency", "messages"), [("2ms", N), ("", 20 * N)], ids=["locked", "unlocked"])
def test_two_resubmits_move_each_message_once(tmp_path: Path, latency: str, messages: int) -> None:
    store = dead_lettered_store(tmp_path / "store.db", messages, "Twice")
    args = ["resubmit", "orders", "--to", "retry", "--batch-size", "5" if latency else "1", "-o", "json"]
    # Both at work whatever the machine's speed: `a` moves a few, then waits at a gate until `b`
    # has moved some too (a process start can take longer than a whole run on a busy machine).
    release = tmp_path / "release"
    a = _start(store, args, latency, **gate_env("retry", 5, until=release))
    assert a.stderr is not None
    wait_for_line(a.stderr, GUARD_S, GATE + "\n")
    held = len(stored_ids(store, "retry"))  # `a` is held: only `b` adds to these now
    b = _start(store, args, latency)
    deadline = time.monotonic() + GUARD_S
    while len(stored_ids(store, "retry")) == held and b.poll() is None:
        assert time.monotonic() < deadline, "the second operator moved nothing"
        time.sleep(0.05)  # a polling interval: the copies are another process's work
    release.write_text("go")
    out_a, err_a = a.communicate(timeout=300)
    out_b, err_b = b.communicate(timeout=300)
    assert a.returncode == 0, err_a
    assert b.returncode == 0, err_b
    moved = Counter(stored_ids(store, "retry"))
    assert stored_ids(store, "orders/$DeadLetterQueue") == []
    assert set(moved) == {f"m-{i}" for i in range(messages)}
    assert max(moved.values()) == 1, "a message was resubmitted twice"
    total = json.loads(out_a)["resubmitted"] + json.loads(out_b)["resubmitted"]
    assert total == messages
    assert json.loads(out_a)["resubmitted"] > 0 and json.loads(out_b)["resubmitted"] > 0, "one operator did all"


def test_two_purges_with_export_split_the_work(store: Path, tmp_path: Path) -> None:
    a = _start(store, ["purge", "orders", "--yes", "--batch-size", "25", "--export", str(tmp_path / "a.jsonl")])
    b = _start(store, ["purge", "orders", "--yes", "--batch-size", "25", "--export", str(tmp_path / "b.jsonl")])
    for p in (a, b):
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    exported: Counter[str] = Counter()
    for name in ("a.jsonl", "b.jsonl"):
        exported.update(json.loads(line)["message_id"] for line in (tmp_path / name).read_text().splitlines())
    assert set(exported) == {f"m-{i}" for i in range(N)}
    assert max(exported.values()) == 1
    assert stored_ids(store, "orders/$DeadLetterQueue") == []
