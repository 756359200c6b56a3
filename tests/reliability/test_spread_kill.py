"""kill -9 during `resubmit --spread` never loses a message, and leaves at most --concurrency
originals beside their scheduled copy per kill; every original completed has its copy in a
spread record (so `spread cancel` can find it).

As tests/reliability/test_export_kill_replay.py: the real `sbdlq` in a subprocess kills itself
(SIGKILL) at a named moment of its loop in a seeded call, so each run is cut mid-way however fast
or slow the machine is; the emulator's clock is moved past the lock duration between runs.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from support import dead_letter_all
from support.process import GATE, GATED, KILL_PRELUDE, gate_env, run_or_kill, sbdlq_env, start_sbdlq, wait_for_line

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

#: Runs `sbdlq` with a SIGKILL at one moment of the loop, in the call TEST_KILL_AT ("moment:n") names:
#: before the nth schedule, after it and before its record, after the nth record and before any
#: complete, halfway through the nth complete; for `spread cancel`, before the nth cancel (the
#: copies exported) and after it (before the record says so).
KILLING = (
    KILL_PRELUDE
    + """
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.operations.spread_file import SpreadWriter

def hook(cls, name, *, after):
    real = getattr(cls, name)
    async def hooked(self, *args):
        if not after and nth():
            die()
        got = await real(self, *args)
        if after and nth():
            die()
        return got
    setattr(cls, name, hooked)

if moment in ("schedule", "scheduled"):
    hook(EmulatorBackend, "schedule", after=moment == "scheduled")
elif moment in ("cancel", "cancelled"):
    hook(EmulatorBackend, "cancel_scheduled", after=moment == "cancelled")
elif moment == "recorded":
    real_record = SpreadWriter.record
    def record(self, copies):
        real_record(self, copies)
        if nth():
            die()
    SpreadWriter.record = record
else:
    real_complete = EmulatorBackend.complete
    async def complete(self, address, messages):
        if nth():
            await real_complete(self, address, messages[: len(messages) // 2])
            die()
        return await real_complete(self, address, messages)
    EmulatorBackend.complete = complete

sys.argv[0] = "sbdlq"
from sbdlq.entry import main
main()
"""
)
SPREAD_MOMENTS = ["schedule", "scheduled", "recorded", "completing"]


def _run_killed(argv: list[str], env: dict[str, str], moment: str, at: int) -> None:
    """Run `sbdlq` to its SIGKILL at `moment` in call `at`; it must get there (a run that ends first fails)."""
    proc = start_sbdlq(argv, {**env, "TEST_KILL_AT": f"{moment}:{at}"}, quiet=True, script=KILLING)
    try:
        _, err = proc.communicate(timeout=300)  # a hang guard, not a kill window
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == -signal.SIGKILL, f"{moment}:{at} ended {proc.returncode} before its kill: {err}"


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
    previous_dups = 0
    for k in range(KILLS + 1):
        skew = k * (LOCK_S + 1)
        env = sbdlq_env(
            store, SBDLQ_EMULATOR_CLOCK_SKEW=f"{skew}s", SBDLQ_EMULATOR_LATENCY="10ms", SBDLQ_STATE_DIR=str(state)
        )
        argv = [*ARGV, "--spread", "2h"]
        if k == KILLS:
            run_or_kill(argv, env, None)
        else:
            # Each moment three times, in a call 1-4: a run completes at most 4 chunks, so every
            # run has more left than that and is cut mid-way.
            _run_killed(argv, env, SPREAD_MOMENTS[k % len(SPREAD_MOMENTS)], rng.randint(1, 4))
        later = skew + LOCK_S + 1
        dlq = _all(store, "orders/$DeadLetterQueue", later)
        copies = _all(store, "retry", later)
        seen = Counter(m.message_id for m in [*dlq, *copies])
        assert not all_ids - set(seen), f"kill {k}: lost {sorted(all_ids - set(seen))[:5]}"
        dups = sum(seen.values()) - N
        assert dups - previous_dups <= CONCURRENCY, f"kill {k}: {dups - previous_dups} new duplicates"
        previous_dups = dups
        # An original gone has a copy in a record: nothing completed without its number written.
        # (A copy scheduled by a run killed before its record stays unrecorded beside its original;
        # a later run schedules and records another copy before it completes that original.)
        recorded = _recorded(state)
        held = {m.message_id for m in dlq} | {m.message_id for m in copies if m.sequence_number in recorded}
        unrecorded = sorted(all_ids - held)
        assert unrecorded == [], f"kill {k}: originals completed whose copy no record holds: {unrecorded[:5]}"
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
    env = sbdlq_env(store, SBDLQ_STATE_DIR=str(state), SBDLQ_EMULATOR_LATENCY="10ms")
    rng = random.Random("sbdlq-spread-cancel-kill")
    previous_dups = 0
    for k in range(6):
        argv = ["spread", "cancel", spread_id, "--export", str(held)]
        if k == 5:
            run_or_kill(argv, env, None)
        else:
            # Before a cancel (copies exported) and after it (before the record): in a batch 1-3,
            # each run cancels at most 3 batches, so every run is cut mid-way.
            _run_killed(argv, env, ["cancel", "cancelled"][k % 2], rng.randint(1, 3))
            assert _all(store, "retry", 0), f"kill {k}: the run was not cut mid-way"
        # A kill inside a write may tear the last line: its copy was not cancelled (that waits for
        # the fsync), and the next run cuts it.
        whole = held.read_bytes().rpartition(b"\n")[0].decode() if held.exists() else ""
        exported = [json.loads(line)["message_id"] for line in whole.splitlines()]
        seen = Counter([*(m.message_id for m in _all(store, "retry", 0)), *exported])
        assert set(seen) == {f"m-{i}" for i in range(N)}, f"kill {k}: lost messages"
        dups = sum(seen.values()) - N
        assert dups - previous_dups <= CANCEL_BATCH, f"kill {k}: {dups - previous_dups} new duplicates"
        previous_dups = dups
    assert _all(store, "retry", 0) == []  # the last run finished: every copy is in the file
