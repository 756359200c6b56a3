"""kill -9 at seeded random moments never loses a message (issue: never lose a message).

Each scenario runs the real `sbdlq` in a subprocess against an emulator store, kills it
with SIGKILL at a seeded random moment, checks that every message id is still in the
DLQ, the target or the export file, and that a kill added no more duplicates than its
bound; then runs again. With SBDLQ_EMULATOR_LATENCY the emulator behaves as a namespace
(send, then complete: at most --concurrency duplicates per kill); without it a resubmit moves
each batch in one transaction (none): without locks, or under lock where --rate paces it.
The emulator clock is moved past the lock duration between runs (SBDLQ_EMULATOR_CLOCK_SKEW),
as if the killed process's locks had lapsed.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from support import dead_letter_all, stored_ids
from support.process import run_or_kill, sbdlq_env

from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

pytestmark = pytest.mark.slow

N = 3000
KILLS = 20
CONCURRENCY = 8
LOCK_S = 60.0
# Without latency a resubmit of 3,000 takes well under a second: --rate keeps each run long
# enough for the kills to land mid-way in every one of the 20.
ATOMIC_RATE = 200
# Without --rate nothing paces the unlocked loop (a transaction per message at --batch-size 1,
# a few thousand a second): a DLQ this big outlasts the 20 kills.
UNLOCKED_N = 30_000


def _seed_dlq(store: Path, n: int = N) -> None:
    eng = Engine(store)
    eng.create_queue("orders", lock_duration_s=LOCK_S)
    eng.create_queue("retry")
    for start in range(0, n, 5000):
        messages = [
            OutboundMessage(body=f"order {i}".encode(), message_id=f"m-{i}") for i in range(start, min(n, start + 5000))
        ]
        dead_letter_all(eng, "orders", messages, "Crash", "test")
    eng.close()


def _seed_big_dlq(store: Path) -> None:
    _seed_dlq(store, UNLOCKED_N)


def _seed_transfer_dlq(store: Path) -> None:
    eng = Engine(store)
    eng.create_queue("parked", status="Disabled")
    eng.create_queue("orders", lock_duration_s=LOCK_S, forward_to="parked")
    eng.create_queue("retry")
    eng.send("orders", [OutboundMessage(body=f"order {i}".encode(), message_id=f"m-{i}") for i in range(N)])
    eng.close()


def _ids(store: Path, path: str, skew: float) -> list[str]:
    return stored_ids(store, path, clock=lambda: time.time() + skew)


def _export_ids(path: Path, *, finished: bool = False) -> list[str]:
    """The message ids of the export's whole records.

    A kill inside a write of several pages may leave the last record torn (Linux ends such a
    write short on a fatal signal). Its message was not deleted (that waits for the fsync), and
    the next run cuts the tail (`Exporter._repair`), which must start like a record. A run that
    finished leaves whole lines only.
    """
    if not path.exists():
        return []
    whole, _, torn = path.read_bytes().rpartition(b"\n")
    if finished:
        assert not torn, "a finished run left a torn last line"
    record = b'{"sequence_number": '
    cuttable = torn.startswith(record) or record.startswith(torn)
    assert cuttable, f"the export ends with a tail no run may cut: {torn[:60]!r}"
    return [json.loads(line)["message_id"] for line in whole.decode().splitlines()]


def _marked_deleted(path: Path) -> set[str]:
    """The message ids of the export's whole records marked deleted (`"sbdlq_deleted": 1`)."""
    if not path.exists():
        return set()
    whole = path.read_bytes().rpartition(b"\n")[0].decode()
    return {d["message_id"] for d in map(json.loads, whole.splitlines()) if d["sbdlq_deleted"] == 1}


def _run(argv: list[str], store: Path, skew: float, kill_after: float | None, latency: str) -> int | None:
    env = sbdlq_env(store, SBDLQ_EMULATOR_CLOCK_SKEW=f"{skew}s")
    if latency:
        env["SBDLQ_EMULATOR_LATENCY"] = latency
    return run_or_kill(argv, env, kill_after)


class Scenario(NamedTuple):
    seed: Callable[[Path], None]
    argv: list[str]
    #: the queue the messages are moved from
    source: str
    #: SBDLQ_EMULATOR_LATENCY ("": none)
    latency: str
    #: new duplicates a kill may leave
    bound: int
    messages: int = N
    #: seconds after its start a run is killed, drawn between these
    window: tuple[float, float] = (0.4, 1.0)


RESUBMIT = ["resubmit", "orders", "--to", "retry", "--batch-size", "20", "--concurrency", str(CONCURRENCY)]
SCENARIOS = {
    "resubmit": Scenario(_seed_dlq, RESUBMIT, "orders/$DeadLetterQueue", "10ms", CONCURRENCY),
    "resubmit-one-transaction": Scenario(
        _seed_dlq,
        ["resubmit", "orders", "--to", "retry", "--batch-size", "5", "--rate", str(ATOMIC_RATE)],
        "orders/$DeadLetterQueue",
        "",
        0,
    ),
    "resubmit-unlocked": Scenario(
        _seed_big_dlq,
        ["resubmit", "orders", "--to", "retry", "--batch-size", "1"],
        "orders/$DeadLetterQueue",
        "",
        0,
        messages=UNLOCKED_N,
        window=(0.1, 0.4),
    ),
    "purge-export": Scenario(
        _seed_dlq,
        ["purge", "orders", "--yes", "--batch-size", "5", "--export", "{export}"],
        "orders/$DeadLetterQueue",
        "10ms",
        5,
    ),
    "transfer-dlq-resubmit": Scenario(
        _seed_transfer_dlq,
        ["transfer-dlq", *RESUBMIT],
        "orders/$Transfer/$DeadLetterQueue",
        "10ms",
        CONCURRENCY,
    ),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_sigkill_never_loses_a_message(tmp_path: Path, scenario: str) -> None:
    seed, argv, source, latency, bound, n, window = SCENARIOS[scenario]
    store = tmp_path / "store.db"
    export = tmp_path / "export.jsonl"
    seed(store)
    argv = [a.replace("{export}", str(export)) for a in argv]
    rng = random.Random(f"sbdlq-{scenario}")
    all_ids = {f"m-{i}" for i in range(n)}
    previous_dups = 0
    killed = 0
    for k in range(KILLS):
        skew = k * (LOCK_S + 1)
        rc = _run(argv, store, skew, kill_after=rng.uniform(*window), latency=latency)
        killed += rc is None
        in_source = _ids(store, source, skew + LOCK_S + 1)
        # A record marked deleted is never of a message still in the DLQ: replay sends it safely.
        assert not _marked_deleted(export) & set(in_source), f"kill {k}: a record marked deleted is in the DLQ"
        seen = Counter(in_source)
        seen.update(_ids(store, "retry", skew + LOCK_S + 1))
        seen.update(_export_ids(export))
        missing = all_ids - set(seen)
        assert not missing, f"kill {k}: lost {sorted(missing)[:5]}"
        dups = sum(seen.values()) - n
        new_dups = dups - previous_dups
        assert new_dups <= bound, f"kill {k}: {new_dups} new duplicates, more than {bound}"
        previous_dups = dups
    assert killed >= KILLS // 2, f"only {killed} runs were killed mid-way; the kill window is wrong"
    # Running again finishes the job.
    _run(argv, store, (KILLS + 1) * (LOCK_S + 1), kill_after=None, latency=latency)
    assert _ids(store, source, 10**6) == []
    finished = Counter(_ids(store, "retry", 10**6)) + Counter(_export_ids(export, finished=True))
    assert set(finished) == all_ids
    if export.exists():
        # The export replayed (the records never marked deleted too: the DLQ is empty now) gives
        # each message one copy, however many times the kills made it export one.
        replay = ["replay", str(export), "--to", "retry", "--include-held-back", "--state", str(tmp_path / "s")]
        _run(replay, store, (KILLS + 2) * (LOCK_S + 1), kill_after=None, latency="")
        copies = Counter(_ids(store, "retry", 10**6))
        assert set(copies) == all_ids and max(copies.values()) == 1
