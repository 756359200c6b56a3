"""Through the wire: resubmit with the servicebus backend (real SDK) against `sbdlq emulator serve`."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import seed_dlq
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.operations.resubmit import resubmit
from sbdlq.paths import Address, EntityPath, SubQueue

CONN = (
    "Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)
DLQ = Address(EntityPath("orders"), SubQueue.DEAD_LETTER)


def _serve(store: Path) -> tuple[int, int | None, threading.Event, threading.Thread]:
    from sbdlq.emulator.amqp.server import serve

    ports: list[tuple[int, int | None]] = []
    ready = threading.Event()
    stop = threading.Event()

    def on_ready(amqp: int, http: int | None) -> None:
        ports.append((amqp, http))
        ready.set()

    thread = threading.Thread(
        target=serve,
        args=(str(store),),
        kwargs={"port": 0, "http_port": 0, "ready": on_ready, "stop_event": stop},
        daemon=True,
    )
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the AMQP listener did not start")
    return ports[0][0], ports[0][1], stop, thread


async def _resubmit(backend: Any) -> tuple[float, int]:
    t0 = time.perf_counter()
    result = await resubmit(backend, DLQ, EntityPath("retry"), batch_size=100, concurrency=32)
    elapsed = time.perf_counter() - t0
    await backend.close()
    return elapsed, result.resubmitted


def run(n: int = 1000) -> dict[str, Any]:
    from sbdlq.backends.servicebus import ServiceBusBackend
    from sbdlq.emulator.engine import Engine

    with tempfile.TemporaryDirectory() as d:
        local = Path(d) / "local.db"
        seed_dlq(local, "orders", n)
        Engine(local).create_queue("retry")
        t_local, moved_local = asyncio.run(_resubmit(EmulatorBackend(str(local))))

        wire = Path(d) / "wire.db"
        seed_dlq(wire, "orders", n)
        Engine(wire).create_queue("retry")
        port, http, stop, thread = _serve(wire)
        try:
            # The listener's HTTP side answers the admin client (entity properties, counts);
            # without it the backend would fall back to paging with peek.
            backend = ServiceBusBackend(connection_string=CONN.format(port=port), timeout_s=30, admin_port=http)
            t_wire, moved_wire = asyncio.run(_resubmit(backend))
        finally:
            stop.set()
            thread.join(10)
    return {
        "messages": n,
        "emulator_backend_per_s": round(moved_local / t_local),
        "servicebus_over_amqp_per_s": round(moved_wire / t_wire),
        "ratio_wire_vs_emulator": round((moved_wire / t_wire) / (moved_local / t_local), 3),
        "moved": {"emulator": moved_local, "wire": moved_wire},
    }
