"""Incident scale (issue 35): a million dead letters, through the real SDK and `emulator serve`, near and far.

Two stores are seeded once: `orders` with `large` DLQ messages (purge, inspect-reason) and
with `small` (`peek --all -o jsonl`, resubmit `--concurrency 128`). Each task runs as a whole
`sbdlq` process against `emulator serve` (a process of its own, on a fresh copy of the seeded
store) through a delaying proxy adding 0 ms, then 70 ms, to each round trip: seconds, the
child's CPU time and peak RSS, and the 70 ms / 0 ms ratio (CPU time is the figure a loaded
machine does not inflate: wall time there is mostly waiting for a core). After each run the store is checked: every
message went (purge), arrived once (resubmit), was shown once (peek), or was counted once
(inspect-reason). inspect-reason on the local store (no wire) is the row that shows what the
wire costs. resubmit's row also gives the Little's-law floor at the round trip measured
through the SDK (100,000 / 128 × 2 × RTT) and how close it came.

    python -m benchmarks.million [LARGE [SMALL]]      (defaults 1,000,000 and 100,000)
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, run_child, run_child_usage, seed_dlq
from benchmarks.proxy import DelayingProxy

RTTS_MS = (0, 70)
CONCURRENCY = 128
CONN = (
    "Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)
_SERVE = """
import sys
from sbdlq.emulator.amqp.server import serve
serve(sys.argv[1], port=0, http_port=0, ready=lambda a, h: print(a, h, flush=True))
"""


class Served:
    """`emulator serve` in a process of its own on a copy of a seeded store, behind a delaying proxy."""

    def __init__(self, template: Path, store: Path, rtt_ms: int) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{store}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(template, store)
        self.store = store
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(store)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if len(line) != 2:
            self.process.kill()
            raise RuntimeError("the AMQP listener did not start")
        self.http = int(line[1])
        self.proxy = DelayingProxy(int(line[0]), rtt_ms / 1000)
        self.conn = CONN.format(port=self.proxy.port)

    def sbdlq(self, *args: str, stdout: int | None = None) -> tuple[float, float, int]:
        """Seconds, CPU seconds and peak RSS (MB) of one `sbdlq` process against this listener."""
        argv = [sys.executable, "-m", "sbdlq", "--connection-string", self.conn, "--timeout", "120s", *args]
        env = {"PYTHONPATH": str(ROOT), "SBDLQ_EMULATOR_HTTP_PORT": str(self.http)}
        seconds, usage, rc = run_child_usage(argv, env=env, stdout=stdout)
        if rc != 0:
            raise RuntimeError(f"sbdlq {' '.join(args)} exited {rc}")
        return seconds, usage.ru_utime + usage.ru_stime, int(usage.ru_maxrss) // 1024

    def close(self) -> None:
        self.proxy.close()
        self.process.terminate()
        self.process.wait(60)


def counts(store: Path) -> tuple[int, int, int]:
    """(active, dead-lettered, distinct message ids among the active) of `orders`."""
    conn = sqlite3.connect(store)
    try:
        rows = dict(
            conn.execute(
                "SELECT queue, COUNT(*) FROM message JOIN entity ON entity.id = entity_id "
                "WHERE entity.path = 'orders' GROUP BY queue"
            ).fetchall()
        )
        distinct = conn.execute(
            "SELECT COUNT(DISTINCT message_id) FROM message JOIN entity ON entity.id = entity_id "
            "WHERE entity.path = 'orders' AND queue = 0"
        ).fetchone()[0]
    finally:
        conn.close()
    return rows.get(0, 0), rows.get(1, 0), distinct


def _task(name: str, n: int, tmp: Path) -> tuple[list[str], Callable[[Path, Path], bool]]:
    """A task's arguments and its check of (the store after, its output)."""

    def purged(store: Path, _: Path) -> bool:
        return counts(store)[:2] == (0, 0)

    def counted(store: Path, out: Path) -> bool:
        groups = json.loads(out.read_text())
        return sum(g["count"] for g in groups) == n and counts(store)[:2] == (0, n)

    def shown(store: Path, out: Path) -> bool:
        ids = [json.loads(line)["message_id"] for line in out.open()]
        return len(ids) == n == len(set(ids)) and counts(store)[:2] == (0, n)

    def moved(store: Path, _: Path) -> bool:
        return counts(store) == (n, 0, n)

    return {
        "purge": (["purge", "orders", "--yes", "-o", "json"], purged),
        "inspect-reason": (["inspect-reason", "orders", "-o", "json"], counted),
        "peek --all -o jsonl": (["peek", "orders", "--all", "-o", "jsonl"], shown),
        "resubmit": (["resubmit", "orders", "--concurrency", str(CONCURRENCY), "-o", "json"], moved),
    }[name]


def _row(name: str, template: Path, n: int, tmp: Path) -> dict[str, Any]:
    args, check = _task(name, n, tmp)
    row: dict[str, Any] = {"messages": n}
    for rtt in RTTS_MS:
        served = Served(template, tmp / "served.db", rtt)
        out = tmp / "out"
        try:
            with out.open("wb") as f:
                seconds, cpu, rss = served.sbdlq(*args, stdout=f.fileno())
        finally:
            served.close()
        row[f"{rtt}ms"] = {
            "seconds": round(seconds, 1),
            "client_cpu_seconds": round(cpu, 1),
            "peak_rss_mb": rss,
            "exact": check(served.store, out),
        }
    row["ratio_70_over_0"] = round(row["70ms"]["seconds"] / row["0ms"]["seconds"], 2)
    return row


def _local_inspect(template: Path, n: int, tmp: Path) -> dict[str, Any]:
    """inspect-reason on the local store: no wire, no SDK."""
    store = tmp / "local.db"
    shutil.copyfile(template, store)
    out = tmp / "local.out"
    argv = [sys.executable, "-m", "sbdlq", "inspect-reason", "orders", "-o", "json"]
    env = {"SBDLQ_EMULATOR": str(store), "PYTHONPATH": str(ROOT)}
    with out.open("wb") as f:
        seconds, rss_kib, rc = run_child(argv, env=env, stdout=f.fileno())
    groups = json.loads(out.read_text()) if rc == 0 else []
    exact = sum(g["count"] for g in groups) == n
    return {"seconds": round(seconds, 1), "peak_rss_mb": rss_kib // 1024, "exact": exact}


def _measured_rtt(template: Path, tmp: Path) -> float:
    """The round trip at 70 ms through the SDK, the proxy and the listener (the wire benchmark's measure)."""
    from benchmarks.wire import Wire, _measured_rtt

    wire = Wire(tmp / "rtt.db", 0.07)
    try:
        import asyncio

        return asyncio.run(_measured_rtt(wire, wire.dlq(1)))
    finally:
        wire.close()


def run(large: int = 1_000_000, small: int = 100_000) -> dict[str, Any]:
    """Every task at 0 and 70 ms, checked; the local inspect-reason; resubmit against its floor."""
    figures: dict[str, Any] = {"large": large, "small": small, "concurrency": CONCURRENCY}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        stores = {large: tmp / "large.db", small: tmp / "small.db"}
        for n, path in stores.items():
            seed_dlq(path, "orders", n, chunk=20_000)
        tasks = (("purge", large), ("inspect-reason", large), ("peek --all -o jsonl", small), ("resubmit", small))
        for name, n in tasks:
            print(f"   {name} of {n:,}", file=sys.stderr, flush=True)
            figures[name] = _row(name, stores[n], n, tmp)
        figures["inspect-reason"]["local_store"] = _local_inspect(stores[large], large, tmp)
        rtt = _measured_rtt(stores[small], tmp)
        floor = small / CONCURRENCY * 2 * rtt
        seconds = figures["resubmit"]["70ms"]["seconds"]
        figures["resubmit"]["measured_rtt_ms"] = round(rtt * 1000, 1)
        figures["resubmit"]["floor_seconds"] = round(floor, 1)
        figures["resubmit"]["of_the_ceiling"] = round(floor / seconds, 2)
    return figures


if __name__ == "__main__":
    sizes = [int(a.replace(",", "").replace("_", "")) for a in sys.argv[1:3]]
    print(json.dumps(run(*sizes), indent=1))
