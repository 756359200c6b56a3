"""Overlap: resubmit against a far-away broker (SBDLQ_EMULATOR_LATENCY) vs a naive loop.

The settlement document's headline: with a 70 ms round trip, 100 sends awaited one by one
take at least 8 s; overlapped, well under one second.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import seed_dlq
from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import ReceiveMode
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.operations.resubmit import make_copy, resubmit

LATENCY_S = 0.070


async def _sbdlq(path: Path, *, concurrency: int = 32, batch_size: int = 100) -> tuple[float, int]:
    backend = EmulatorBackend(str(path), latency_s=LATENCY_S)
    source = Address(EntityPath("orders"), SubQueue.DEAD_LETTER)
    t0 = time.perf_counter()
    result = await resubmit(backend, source, EntityPath("orders"), concurrency=concurrency, batch_size=batch_size)
    elapsed = time.perf_counter() - t0
    await backend.close()
    return elapsed, result.resubmitted


async def _naive(path: Path, n: int) -> tuple[float, int]:
    """Receive one, send it, complete it: each round trip awaited before the next."""
    backend = EmulatorBackend(str(path), latency_s=LATENCY_S)
    source = Address(EntityPath("orders"), SubQueue.DEAD_LETTER)
    moved = 0
    t0 = time.perf_counter()
    while moved < n:
        got = await backend.receive(source, 1, mode=ReceiveMode.PEEK_LOCK)
        if not got:
            break
        await backend.send(EntityPath("orders"), [make_copy(got[0], source=source)])
        await backend.complete(source, got)
        moved += 1
    elapsed = time.perf_counter() - t0
    await backend.close()
    return elapsed, moved


def run(quick: bool = False) -> dict[str, Any]:
    """Figures for 100 and 1,000 messages, and the sweep over concurrency and batch size."""
    figures: dict[str, Any] = {"latency_ms": LATENCY_S * 1000}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (100, 1000):
            store = Path(tmp) / f"overlap-{n}.db"
            seed_dlq(store, "orders", n)
            t_sbdlq, moved = asyncio.run(_sbdlq(store))
            assert moved == n, f"resubmitted {moved} of {n}"
            # The naive loop is linear by construction; --quick measures 100 and scales.
            naive_n = min(n, 100) if quick else n
            store2 = Path(tmp) / f"naive-{n}.db"
            seed_dlq(store2, "orders", naive_n)
            t_naive, moved2 = asyncio.run(_naive(store2, naive_n))
            assert moved2 == naive_n
            t_naive *= n / naive_n
            figures[f"resubmit_{n}_s"] = round(t_sbdlq, 3)
            figures[f"naive_{n}_s"] = round(t_naive, 3)
            figures[f"speedup_{n}"] = round(t_naive / t_sbdlq, 1)
        sweep = []
        for concurrency, batch in ((1, 100), (4, 100), (16, 100), (32, 100), (64, 100), (32, 10), (32, 50), (32, 250)):
            store = Path(tmp) / f"sweep-{concurrency}-{batch}.db"
            seed_dlq(store, "orders", 1000)
            t, moved = asyncio.run(_sbdlq(store, concurrency=concurrency, batch_size=batch))
            sweep.append({"concurrency": concurrency, "batch_size": batch, "seconds": round(t, 3), "messages": moved})
        figures["sweep_1000"] = sweep
    return figures
