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
through the SDK (100,000 / 128 × 2 × RTT) and how close it came, with the CPU each process
spent per chunk of 128 (the client's and serve's: on this rig both run on the same 2 cores, in
the chunk's time beside the two round trips).

`peek --all -o table` is measured on its own (`table_memory`): TABLE DLQ messages (150,000) in
the local emulator store, the command's own peak RSS (VmHWM at exit, as benchmarks/memory.py
reads it: a child's ru_maxrss starts from its parent's size at fork) beside `-o jsonl`'s.

    python -m benchmarks.million [LARGE [SMALL]] [--only TASK,...] [--rtts 0,70] [--table N]
      (defaults 1,000,000, 100,000, every task, 0 and 70 ms, 150,000; --only table: the table alone)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, orders_counts, run_child, run_child_usage, seed_dlq
from benchmarks.proxy import DelayingProxy

RTTS_MS = (0, 70)
CONCURRENCY = 128
TASKS = ("purge", "inspect-reason", "peek --all -o jsonl", "resubmit")
#: DLQ messages `peek --all -o table` is measured over, and its goal (issue 35)
TABLE_N = 150_000
TABLE_GOAL_MB = 150
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

    def cpu_seconds(self) -> float:
        """serve's CPU seconds so far (user + system, from /proc)."""
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.proxy.close()
        self.process.terminate()
        self.process.wait(60)


def _task(name: str, n: int, tmp: Path) -> tuple[list[str], Callable[[Path, Path], bool]]:
    """A task's arguments and its check of (the store after, its output)."""

    def purged(store: Path, _: Path) -> bool:
        return orders_counts(store)[:2] == (0, 0)

    def counted(store: Path, out: Path) -> bool:
        groups = json.loads(out.read_text())
        return sum(g["count"] for g in groups) == n and orders_counts(store)[:2] == (0, n)

    def shown(store: Path, out: Path) -> bool:
        ids = [json.loads(line)["message_id"] for line in out.open()]
        return len(ids) == n == len(set(ids)) and orders_counts(store)[:2] == (0, n)

    def moved(store: Path, _: Path) -> bool:
        return orders_counts(store) == (n, 0, n)

    return {
        "purge": (["purge", "orders", "--yes", "-o", "json"], purged),
        "inspect-reason": (["inspect-reason", "orders", "-o", "json"], counted),
        "peek --all -o jsonl": (["peek", "orders", "--all", "-o", "jsonl"], shown),
        "resubmit": (["resubmit", "orders", "--concurrency", str(CONCURRENCY), "-o", "json"], moved),
    }[name]


def _row(name: str, template: Path, n: int, tmp: Path, rtts: tuple[int, ...] = RTTS_MS) -> dict[str, Any]:
    args, check = _task(name, n, tmp)
    row: dict[str, Any] = {"messages": n}
    for rtt in rtts:
        served = Served(template, tmp / "served.db", rtt)
        out = tmp / "out"
        load = os.getloadavg()[0]
        try:
            with out.open("wb") as f:
                seconds, cpu, rss = served.sbdlq(*args, stdout=f.fileno())
            serve_cpu = served.cpu_seconds()
        finally:
            served.close()
        row[f"{rtt}ms"] = {
            "seconds": round(seconds, 1),
            "client_cpu_seconds": round(cpu, 1),
            "serve_cpu_seconds": round(serve_cpu, 1),
            "peak_rss_mb": rss,
            "exact": check(served.store, out),
            # the machine is shared: its load average when the run began and when it ended
            "load_average": [round(load, 1), round(os.getloadavg()[0], 1)],
        }
    if "0ms" in row and "70ms" in row:
        row["ratio_70_over_0"] = round(row["70ms"]["seconds"] / row["0ms"]["seconds"], 2)
    return row


def _resubmit_ceiling(row: dict[str, Any], n: int, rtt: float) -> None:
    """The Little's-law ceiling at the measured round trip, how close the 70 ms run came, and
    what each chunk of CONCURRENCY took: its wall time beside the client's and serve's CPU."""
    chunks = n / CONCURRENCY
    floor = chunks * 2 * rtt
    far = row["70ms"]
    row["measured_rtt_ms"] = round(rtt * 1000, 1)
    row["floor_seconds"] = round(floor, 1)
    row["of_the_ceiling"] = round(floor / far["seconds"], 2)
    row["per_chunk_ms"] = {
        "wall": round(far["seconds"] / chunks * 1000, 1),
        "two_round_trips": round(2 * rtt * 1000, 1),
        "client_cpu": round(far["client_cpu_seconds"] / chunks * 1000, 1),
        "serve_cpu": round(far["serve_cpu_seconds"] / chunks * 1000, 1),
    }


def _peak_rss(argv: list[str], env: dict[str, str], stdout: int) -> tuple[float, int, int]:
    """Seconds, the command's own peak RSS (VmHWM at exit) and wait4's ru_maxrss, both in KiB."""
    from benchmarks.memory import REPORTING_PEAK

    with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        command = [sys.executable, "-c", REPORTING_PEAK, *argv]
        seconds, usage, rc = run_child_usage(command, env={**env, "BENCH_PEAK_FILE": peak.name}, stdout=stdout)
        if rc != 0:
            raise RuntimeError(f"sbdlq {' '.join(argv)} exited {rc}")
        return seconds, int(peak.read() or 0), int(usage.ru_maxrss)


def table_memory(n: int = TABLE_N, tmp: Path | None = None) -> dict[str, Any]:
    """`peek --all -o table` over n DLQ messages in the local store: its own peak RSS beside
    `-o jsonl`'s, both written to a file, every message shown once (a jsonl line each, a table
    row each)."""
    if tmp is None:
        with tempfile.TemporaryDirectory() as d:
            return table_memory(n, Path(d))
    store = tmp / "table.db"
    seed_dlq(store, "orders", n, chunk=20_000)
    env = {"SBDLQ_EMULATOR": str(store), "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    figures: dict[str, Any] = {"messages": n, "goal_mb": TABLE_GOAL_MB}
    for fmt in ("table", "jsonl"):
        out = tmp / f"peek.{fmt}"
        with out.open("wb") as f:
            seconds, kib, maxrss_kib = _peak_rss(["peek", "orders", "--all", "-o", fmt], env, f.fileno())
        with out.open("rb") as f:
            shown = sum(1 for line in f if b"m-" in line)
        figures[fmt] = {
            "peak_rss_mb": round(kib / 1024, 1),
            # wait4's ru_maxrss of the same child: an upper bound (it starts from this process's size at fork)
            "ru_maxrss_mb": round(maxrss_kib / 1024, 1),
            "seconds": round(seconds, 1),
            "exact": shown == n,
        }
        out.unlink()
    figures["table_over_jsonl"] = round(figures["table"]["peak_rss_mb"] / figures["jsonl"]["peak_rss_mb"], 2)
    figures["within_goal"] = figures["table"]["peak_rss_mb"] <= TABLE_GOAL_MB
    return figures


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


def run(
    large: int = 1_000_000,
    small: int = 100_000,
    *,
    only: tuple[str, ...] = (*TASKS, "table"),
    rtts: tuple[int, ...] = RTTS_MS,
    table: int = TABLE_N,
) -> dict[str, Any]:
    """Every task at 0 and 70 ms, checked; the local inspect-reason; resubmit against its floor;
    the table's peak RSS."""
    figures: dict[str, Any] = {"large": large, "small": small, "concurrency": CONCURRENCY}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tasks = [(name, large if name in ("purge", "inspect-reason") else small) for name in TASKS if name in only]
        stores = {n: tmp / f"seeded-{n}.db" for _, n in tasks}
        for n, path in stores.items():
            seed_dlq(path, "orders", n, chunk=20_000)
        for name, n in tasks:
            print(f"   {name} of {n:,}", file=sys.stderr, flush=True)
            figures[name] = _row(name, stores[n], n, tmp, rtts)
        if "inspect-reason" in only:
            figures["inspect-reason"]["local_store"] = _local_inspect(stores[large], large, tmp)
        if "resubmit" in only and 70 in rtts:
            _resubmit_ceiling(figures["resubmit"], small, _measured_rtt(stores[small], tmp))
        if "table" in only:
            print(f"   peek --all -o table of {table:,}", file=sys.stderr, flush=True)
            figures["peek --all -o table"] = table_memory(table, tmp)
    return figures


def _count(text: str) -> int:
    return int(text.replace(",", "").replace("_", ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=_count, help="LARGE and SMALL")
    parser.add_argument("--only", default=",".join((*TASKS, "table")), help="tasks, comma-separated")
    parser.add_argument("--rtts", default="0,70", help="round trips added, in ms, comma-separated")
    parser.add_argument("--table", type=_count, default=TABLE_N, help="messages the table is measured over")
    args = parser.parse_args()
    only = tuple(t.strip() for t in args.only.split(",") if t.strip())
    unknown = set(only) - {*TASKS, "table"}
    if unknown:
        parser.error(f"unknown task(s) {', '.join(sorted(unknown))}: choose from {', '.join((*TASKS, 'table'))}")
    rtts = tuple(int(r) for r in args.rtts.split(","))
    print(json.dumps(run(*args.sizes[:2], only=only, rtts=rtts, table=args.table), indent=1))
