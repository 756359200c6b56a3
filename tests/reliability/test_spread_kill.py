"""kill -9 during `resubmit --spread` never loses a message, and leaves at most --concurrency
originals beside their scheduled copy per kill; every original completed has its copy in a
spread record (so `spread cancel` can find it).

As tests/reliability/test_crash_safety.py: the real `sbdlq` in a subprocess, killed at seeded
random moments, the emulator's clock moved past the lock duration between runs.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from support import dead_letter_all
from support.process import GATE, GATED, gate_env, run_or_kill, sbdlq_env, start_sbdlq, wait_for_line

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.models import Message, OutboundMessage
from sbdlq.operations.spread_ops import CANCEL_BATCH

pytestmark = pytest.mark.slow

N = 2000
KILLS = 12
CONCURRENCY = 8
LOCK_S = 60.0
ARGV = ["resubmit", "orders", "--to", "retry", "--batch-size", "20", "--concurrency", str(CONCURRENCY)]


def _seed(store: Path) -> None:
    with Engine(store) as eng:
        eng.create_queue("orders", lock_duration_s=LOCK_S)
        eng.create_queue("retry")
        messages = [OutboundMessage(body=f"order {i}".encode(), message_id=f"m-{i}") for i in range(N)]
        dead_letter_all(eng, "orders", messages, "Crash", "test")


def _all(store: Path, path: str, skew: float) -> list[Message]:
    with Engine(store, clock=lambda: time.time() + skew) as eng:
        out: list[Message] = []
        start = 0
        while page := eng.peek(parse_address(path), start, 1000):
            out += page
            start = page[-1].sequence_number + 1
        return out


def _recorded(state: Path) -> set[int]:
    """The copy sequence numbers of every spread record's whole lines."""
    numbers: set[int] = set()
    for path in (state / "spreads").glob("*.jsonl"):
        whole = path.read_bytes().rpartition(b"\n")[0]
        for line in whole.decode().splitlines():
            item = json.loads(line)
            if "copy" in item:
                numbers.add(item["copy"])
    return numbers


def test_sigkill_during_a_spread_loses_nothing_and_leaves_at_most_concurrency_beside(tmp_path: Path) -> None:
    store, state = tmp_path / "store.db", tmp_path / "state"
    _seed(store)
    rng = random.Random("sbdlq-spread-kill")
    all_ids = {f"m-{i}" for i in range(N)}
    previous_dups = killed = 0
    for k in range(KILLS + 1):
        skew = k * (LOCK_S + 1)
        env = sbdlq_env(
            store, SBDLQ_EMULATOR_CLOCK_SKEW=f"{skew}s", SBDLQ_EMULATOR_LATENCY="10ms", SBDLQ_STATE_DIR=str(state)
        )
        last = k == KILLS
        rc = run_or_kill([*ARGV, "--spread", "2h"], env, None if last else rng.uniform(0.6, 2.0))
        killed += rc is None
        later = skew + LOCK_S + 1
        dlq = _all(store, "orders/$DeadLetterQueue", later)
        copies = _all(store, "retry", later)
        seen = Counter(m.message_id for m in [*dlq, *copies])
        assert not all_ids - set(seen), f"kill {k}: lost {sorted(all_ids - set(seen))[:5]}"
        dups = sum(seen.values()) - N
        assert dups - previous_dups <= CONCURRENCY, f"kill {k}: {dups - previous_dups} new duplicates"
        previous_dups = dups
        # A copy whose original is gone is in a record: nothing completed without its number written.
        in_dlq = {m.message_id for m in dlq}
        recorded = _recorded(state)
        unrecorded = [m.message_id for m in copies if m.sequence_number not in recorded and m.message_id not in in_dlq]
        assert unrecorded == [], f"kill {k}: originals completed whose copy no record holds: {unrecorded[:5]}"
    assert killed >= KILLS // 2, f"only {killed} runs were killed mid-way; the kill window is wrong"
    # The last run finished: every original gone, every copy once, most still waiting their time.
    later = KILLS * (LOCK_S + 1) + LOCK_S + 1
    copies = _all(store, "retry", later)
    assert {m.message_id for m in copies} == all_ids
    assert Counter(m.state for m in copies)["scheduled"] > N // 2
    assert _all(store, "orders/$DeadLetterQueue", later) == []


def _spread_all(store: Path, state: Path) -> str:
    """Spread every DLQ message over 2 hours from 10 minutes ahead; the spread id."""
    env = sbdlq_env(store, SBDLQ_STATE_DIR=str(state))
    run_or_kill([*ARGV, "--spread", "2h", "--start-at", "10m"], env, None)
    (path,) = (state / "spreads").glob("*.jsonl")
    return path.stem


def _cancelled(state: Path, spread_id: str) -> list[int]:
    lines = (state / "spreads" / f"{spread_id}.jsonl").read_text().splitlines()
    return [n for line in lines if "cancelled" in (item := json.loads(line)) for n in item["cancelled"]]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_cancel_between_batches_every_message_once(tmp_path: Path, signum: int) -> None:
    store, state, held = tmp_path / "store.db", tmp_path / "state", tmp_path / "held.jsonl"
    _seed(store)
    spread_id = _spread_all(store, state)
    env = sbdlq_env(
        store,
        SBDLQ_STATE_DIR=str(state),
        SBDLQ_EMULATOR_LATENCY="10ms",
        **gate_env(held, CANCEL_BATCH, until="signal"),
    )
    proc = start_sbdlq(["spread", "cancel", spread_id, "--export", str(held), "-o", "json"], env, script=GATED)
    try:
        assert proc.stderr is not None
        wait_for_line(proc.stderr, 60, GATE + "\n")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == (130 if signum == signal.SIGINT else 143), err
    assert "Traceback" not in err
    report = json.loads(out)
    exported = [json.loads(line)["message_id"] for line in held.read_text().splitlines()]
    # Stopped between batches: what it put in the file it cancelled, and said so.
    assert 0 < len(exported) == report["cancelled"] == len(_cancelled(state, spread_id)) < N
    assert report["not_reached"] == N - report["cancelled"]
    scheduled = [m.message_id for m in _all(store, "retry", 0)]
    assert {m.state for m in _all(store, "retry", 0)} == {"scheduled"}
    assert sorted(scheduled + exported) == sorted(f"m-{i}" for i in range(N))  # every one, none twice


def test_sigkill_during_cancel_loses_nothing_and_leaves_at_most_a_batch_twice(tmp_path: Path) -> None:
    store, state, held = tmp_path / "store.db", tmp_path / "state", tmp_path / "held.jsonl"
    _seed(store)
    spread_id = _spread_all(store, state)
    env = sbdlq_env(store, SBDLQ_STATE_DIR=str(state), SBDLQ_EMULATOR_LATENCY="100ms")
    rng = random.Random("sbdlq-spread-cancel-kill")
    previous_dups = cut = 0
    for k in range(6):
        last = k == 5
        argv = ["spread", "cancel", spread_id, "--export", str(held)]
        rc = run_or_kill(argv, env, None if last else rng.uniform(0.6, 1.8))
        cut += rc is None and bool(_all(store, "retry", 0))
        # A kill inside a write may tear the last line: its copy was not cancelled (that waits for
        # the fsync), and the next run cuts it.
        whole = held.read_bytes().rpartition(b"\n")[0].decode() if held.exists() else ""
        exported = [json.loads(line)["message_id"] for line in whole.splitlines()]
        seen = Counter([*(m.message_id for m in _all(store, "retry", 0)), *exported])
        assert set(seen) == {f"m-{i}" for i in range(N)}, f"kill {k}: lost messages"
        dups = sum(seen.values()) - N
        assert dups - previous_dups <= CANCEL_BATCH, f"kill {k}: {dups - previous_dups} new duplicates"
        previous_dups = dups
    assert cut >= 2, f"only {cut} runs were killed mid-way; the kill window is wrong"
    assert _all(store, "retry", 0) == []  # the last run finished: every copy is in the file
