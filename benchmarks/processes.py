"""Whole sbdlq processes against raw-sqlite3 processes doing the same work (issue 17).

On a DLQ of n messages in the embedded emulator (SBDLQ_EMULATOR=store), each a fresh copy
of one seeded store: `sbdlq resubmit orders` (into its queue), `sbdlq peek orders --all -o
jsonl > file` and `sbdlq purge orders --yes`, against benchmarks/raw_sqlite.py doing the same
statements' work in the same batches. Start-up is included on both sides: it is what a
script or a cron job pays. Figures: the median seconds of `repeat` runs of each, taken in
turn, and their ratio (sbdlq / raw; the goal is resubmit and peek at most 2).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, orders_counts, run_child, seed_dlq

OPS = ("resubmit", "peek", "purge")
GOALS = {"resubmit": 2.0, "peek": 2.0}


def _sbdlq_argv(op: str) -> list[str]:
    # `python -m sbdlq` with the checkout on PYTHONPATH: the code measured is this tree's.
    cmd = [sys.executable, "-m", "sbdlq"]
    if op == "resubmit":
        return [*cmd, "resubmit", "orders", "-o", "json"]
    if op == "peek":
        return [*cmd, "peek", "orders", "--all", "-o", "jsonl"]
    return [*cmd, "purge", "orders", "--yes", "-o", "json"]


def _raw_argv(op: str, store: Path) -> list[str]:
    return [sys.executable, "-m", "benchmarks.raw_sqlite", op, str(store), "orders"]


def _one(op: str, side: str, template: Path, tmp: Path, n: int) -> float:
    """Seconds of one run on a fresh copy of the seeded store; checks that it did the whole job."""
    store = tmp / f"{side}-{op}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(template, store)
    env = {"SBDLQ_EMULATOR": str(store), "PYTHONPATH": str(ROOT)}
    argv = _sbdlq_argv(op) if side == "sbdlq" else _raw_argv(op, store)
    out_path = tmp / f"{side}-{op}.out"
    with open(out_path, "wb") as out:
        seconds, _, rc = run_child(argv, env=env, stdout=out.fileno())
    if rc != 0:
        raise RuntimeError(f"{side} {op} exited {rc}")
    main, dead, _ = orders_counts(store)
    expected = {"resubmit": (n, 0), "peek": (0, n), "purge": (0, 0)}[op]
    if (main, dead) != expected:
        raise RuntimeError(f"{side} {op}: orders holds {main} active, {dead} dead-lettered; expected {expected}")
    if op == "peek":
        with open(out_path, "rb") as f:
            lines = sum(1 for _ in f)
        if lines != n:
            raise RuntimeError(f"{side} peek wrote {lines} lines, expected {n}")
    return seconds


def run(n: int = 100_000, repeat: int = 3) -> dict[str, Any]:
    """Median seconds per side and operation, and the ratios sbdlq / raw."""
    times: dict[str, dict[str, list[float]]] = {op: {"sbdlq": [], "raw": []} for op in OPS}
    same_peek_output = None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        template = tmp / "template.db"
        seed_dlq(template, "orders", n, chunk=20_000)
        for _ in range(repeat):
            for op in OPS:
                # In turn, so both sides see the same machine load.
                for side in ("sbdlq", "raw"):
                    times[op][side].append(_one(op, side, template, tmp, n))
        same_peek_output = _same(tmp / "sbdlq-peek.out", tmp / "raw-peek.out")
    seconds = {op: {side: round(statistics.median(v), 3) for side, v in sides.items()} for op, sides in times.items()}
    ratios = {op: round(s["sbdlq"] / s["raw"], 2) for op, s in seconds.items()}
    return {
        "messages": n,
        "repeat": repeat,
        "median_seconds": seconds,
        "ratios_sbdlq_over_raw": ratios,
        "goals": GOALS,
        "peek_output_identical_to_raw": same_peek_output,
    }


def _same(a: Path, b: Path) -> bool:
    """Whether two outputs hold the same lines (the raw peek writes the bytes sbdlq writes)."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return all(x == y for x, y in zip(fa, fb, strict=True))


if __name__ == "__main__":
    import json

    size = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    print(json.dumps(run(size), indent=1))
