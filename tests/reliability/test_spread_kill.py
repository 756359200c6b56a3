"""kill -9 during `resubmit --spread` never loses a message, and leaves at most --concurrency
originals beside their scheduled copy per kill; every original completed has its copy in a
spread record (so `spread cancel` can find it).

As tests/reliability/test_crash_safety.py: the real `sbdlq` in a subprocess, killed at seeded
random moments, the emulator's clock moved past the lock duration between runs.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from support import dead_letter_all
from support.process import run_or_kill, sbdlq_env

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.models import Message, OutboundMessage

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
