"""Memory: peak RSS of streaming commands over 1M DLQ messages vs 1k (nothing holds the whole DLQ).

A child's ru_maxrss (wait4) starts from its parent's RSS at fork, and this benchmark's own
process is large by the time it runs: each command reports its own high-water mark instead
(VmHWM of its process, read at exit), which counts only what the command itself used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import seed_dlq
from sbdlq.emulator.engine import Engine

REPORTING_PEAK = """
import atexit, os, sys

def _report() -> None:
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["BENCH_PEAK_FILE"], "w") as out:
        out.write(kib)

atexit.register(_report)
sys.argv[0] = "sbdlq"
from sbdlq.entry import main
main()
"""


def run_child(argv: list[str], *, env: dict[str, str], stdout: int | None = None) -> tuple[float, int, int]:
    """Run `sbdlq argv`; (0, its own peak RSS in KiB, exit status), as common.run_child answers."""
    with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        proc = subprocess.run(
            [sys.executable, "-c", REPORTING_PEAK, *argv],
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env, "BENCH_PEAK_FILE": peak.name},
        )
        return 0.0, int(peak.read() or 0), proc.returncode


def _peaks(store: Path, tmp: Path) -> dict[str, int]:
    env = {"SBDLQ_EMULATOR": str(store)}
    peaks = {}
    with open(tmp / "peek.jsonl", "wb") as out:
        _, rss, rc = run_child(["peek", "orders", "--all", "-o", "jsonl"], env=env, stdout=out.fileno())
    assert rc == 0, "peek failed"
    peaks["peek_all_jsonl"] = rss
    Engine(store).create_queue("retry", exist_ok=True)
    _, rss, rc = run_child(["resubmit", "orders", "--to", "retry", "-o", "json"], env=env)
    assert rc == 0, "resubmit failed"
    peaks["resubmit"] = rss
    # Move them back into the DLQ so purge has work: dead-letter what resubmit moved.
    eng = Engine(store)
    from sbdlq.addresses import parse_address

    retry = parse_address("retry")
    while True:
        got = eng.receive(retry, 5000)
        if not got:
            break
        eng.dead_letter(retry, [m.lock_token for m in got if m.lock_token], "Again", "benchmark")
    eng.close()
    _, rss, rc = run_child(["purge", "retry", "--export", str(tmp / "export.jsonl"), "--yes", "-o", "json"], env=env)
    assert rc == 0, "purge failed"
    peaks["purge_export"] = rss
    return peaks


def run(large: int = 1_000_000, small: int = 1_000) -> dict[str, Any]:
    out: dict[str, Any] = {"large": large, "small": small}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for n, key in ((small, "small_kib"), (large, "large_kib")):
            store = tmp / f"mem-{n}.db"
            seed_dlq(store, "orders", n, chunk=20_000)
            out[key] = _peaks(store, tmp)
            subprocess.run(["rm", "-f", str(tmp / "peek.jsonl"), str(tmp / "export.jsonl")], check=False)
    out["growth_mib"] = {k: round((out["large_kib"][k] - out["small_kib"][k]) / 1024, 1) for k in out["small_kib"]}
    out["target_growth_mib"] = 100
    return out
