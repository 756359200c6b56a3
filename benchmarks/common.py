"""Shared helpers for the benchmarks: stores seeded fast, timing, child-process RSS."""

from __future__ import annotations

import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

ROOT = Path(__file__).resolve().parent.parent
BODY = b'{"orderId": 123456, "customer": "c-42", "lines": [{"sku": "A-1", "qty": 2}], "total": 99.5}'


def outbound(n: int, *, start: int = 0) -> list[OutboundMessage]:
    """n realistic small messages with a few application properties."""
    return [
        OutboundMessage(
            body=BODY,
            message_id=f"m-{start + i}",
            subject="order.created",
            content_type="application/json",
            application_properties={"tenant": "eu" if i % 2 else "us", "attempt": i % 5},
        )
        for i in range(n)
    ]


def seed_dlq(path: Path, queue: str, n: int, *, reason: str = "ValidationFailed", chunk: int = 5000) -> None:
    """A queue whose DLQ holds n messages, dead-lettered through the engine as a consumer would."""
    eng = Engine(path)
    eng.create_queue(queue, exist_ok=True, lock_duration_s=300)
    address = parse_address(queue)
    done = 0
    while done < n:
        k = min(chunk, n - done)
        eng.send(queue, outbound(k, start=done))
        got = eng.receive(address, k)
        eng.dead_letter(address, [m.lock_token for m in got if m.lock_token], reason, "benchmark seed")
        done += k
    eng.close()


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sbdlq_cmd() -> list[str]:
    """The installed console script, else `python -m sbdlq`."""
    script = Path(sys.executable).parent / "sbdlq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sbdlq"]


def run_child(
    argv: list[str], *, env: dict[str, str] | None = None, stdout: int | None = None
) -> tuple[float, int, int]:
    """Run a command; (seconds, peak RSS in KiB, exit status) of that child alone."""
    seconds, usage, rc = run_child_usage(argv, env=env, stdout=stdout)
    return seconds, int(usage.ru_maxrss), rc


def run_child_usage(
    argv: list[str], *, env: dict[str, str] | None = None, stdout: int | None = None
) -> tuple[float, resource.struct_rusage, int]:
    """Run a command; (seconds, its resource usage, exit status): CPU time, unlike wall time,
    does not grow with the machine's load."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage, proc.returncode


def median_seconds(argv: list[str], repeat: int, env: dict[str, str] | None = None) -> float:
    """Median wall time of a command over several runs (after one warm-up)."""
    run_child(argv, env=env)
    return statistics.median(run_child(argv, env=env)[0] for _ in range(repeat))


def orders_counts(store: Path) -> tuple[int, int, int]:
    """(active, dead-lettered, distinct message ids among the active) of `orders`, read in the store."""
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
