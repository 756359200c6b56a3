"""Several processes on one store (cron + operator): no double delivery, nothing lost.

The workers are real processes running this file as a script, so they share nothing but
the SQLite file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRELOADED = 2000
SENT_LATER = 600
WORKERS = 4
#: How long a process may wait for the others or for the queue to drain: a hang guard, far above
#: what a busy machine needs (the run is a few seconds alone), not a speed bound.
GUARD_S = 300


def _start_together(out: str) -> None:
    """Say ready, then wait for the parent's go: imports done, every process starts at once."""
    Path(out + ".ready").write_text("ready")
    go = Path(out).parent / "go"
    deadline = time.monotonic() + GUARD_S
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.001)


def _consume(db: str, out: str, done_flag: str, batch: int) -> None:
    """Receive peek-lock and complete until the sender is done and the queue stays empty."""
    from sbdlq.addresses import parse_address
    from sbdlq.emulator.engine import Engine
    from sbdlq.errors import SbdlqError

    address = parse_address("work")
    _start_together(out)
    got: list[str] = []
    errors: list[str] = []
    empties_after_done = 0
    deadline = time.monotonic() + GUARD_S
    with Engine(db) as engine:
        while time.monotonic() < deadline:
            try:
                messages = engine.receive(address, batch)
                if messages:
                    got.extend(str(m.message_id) for m in messages)
                    lost = engine.complete(address, [str(m.lock_token) for m in messages])
                    if lost:
                        errors.append(f"lost locks: {lost[:3]}")
                    empties_after_done = 0
                    continue
            except SbdlqError as exc:  # e.g. TransientError for a busy store: must not happen
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if os.path.exists(done_flag):
                empties_after_done += 1
                if empties_after_done >= 3:
                    break
            time.sleep(0.002)
        else:
            errors.append("worker timed out")
    Path(out).write_text(json.dumps({"ids": got, "errors": errors}))


def _produce(db: str, out: str, done_flag: str) -> None:
    """Send more while the workers drain the queue, in small batches."""
    from sbdlq.emulator.engine import Engine
    from sbdlq.models import OutboundMessage

    seqs: list[int] = []
    _start_together(out)
    with Engine(db) as engine:
        for start in range(0, SENT_LATER, 20):
            batch = [OutboundMessage(body=b"late", message_id=f"late-{i}") for i in range(start, start + 20)]
            seqs.extend(engine.send("work", batch))
            time.sleep(0.003)
    Path(out).write_text(json.dumps({"seqs": seqs}))
    Path(done_flag).write_text("done")


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, __file__, *args], env=env, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_workers_in_several_processes_share_one_queue(tmp_path: Path) -> None:
    from sbdlq.emulator.engine import Engine
    from sbdlq.models import OutboundMessage

    db = str(tmp_path / "shared.db")
    with Engine(db) as engine:
        # A lock far longer than the test: any id seen twice is a double delivery, not a lapse.
        engine.create_queue("work", lock_duration_s=300, max_delivery_count=10)
        first = engine.send("work", [OutboundMessage(body=b"x", message_id=f"pre-{i}") for i in range(PRELOADED)])
    assert first == list(range(1, PRELOADED + 1))

    done_flag = str(tmp_path / "sender.done")
    workers = [
        _spawn("consume", db, str(tmp_path / f"worker{w}.json"), done_flag, str(batch))
        for w, batch in enumerate((10, 25, 50, 100)[:WORKERS])
    ]
    sender = _spawn("produce", db, str(tmp_path / "sender.json"), done_flag)
    procs = [*workers, sender]
    try:
        outs = [*(tmp_path / f"worker{w}.json" for w in range(WORKERS)), tmp_path / "sender.json"]
        deadline = time.monotonic() + GUARD_S
        while not all(Path(f"{o}.ready").exists() for o in outs):
            assert time.monotonic() < deadline, "processes did not start"
            assert all(p.poll() is None for p in procs), "a process died while starting"
            time.sleep(0.01)
        (tmp_path / "go").write_text("go")
        for p in procs:
            _, err = p.communicate(timeout=2 * GUARD_S)
            assert p.returncode == 0, err.decode(errors="replace")[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()

    results = [json.loads((tmp_path / f"worker{w}.json").read_text()) for w in range(WORKERS)]
    errors = [e for r in results for e in r["errors"]]
    assert errors == []
    per_worker = [r["ids"] for r in results]
    everything = [i for ids in per_worker for i in ids]
    expected = {f"pre-{i}" for i in range(PRELOADED)} | {f"late-{i}" for i in range(SENT_LATER)}
    # No message delivered to two lockers, none lost.
    assert len(everything) == len(set(everything)), "a message was delivered twice"
    assert set(everything) == expected
    # Side by side: on a machine busy enough, one worker may find the queue empty every time it
    # gets the CPU, so two that took messages are the proof.
    assert sum(1 for ids in per_worker if ids) >= 2, "the workers did not actually run side by side"

    late_seqs = json.loads((tmp_path / "sender.json").read_text())["seqs"]
    assert late_seqs == list(range(PRELOADED + 1, PRELOADED + SENT_LATER + 1))
    with Engine(db) as engine:
        c = engine.counts("work")
        assert (c.active, c.dead_letter) == (0, 0)


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    if role == "consume":
        _consume(rest[0], rest[1], rest[2], int(rest[3]))
    elif role == "produce":
        _produce(rest[0], rest[1], rest[2])
    else:
        raise SystemExit(f"unknown role {role!r}")
