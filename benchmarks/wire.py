"""Through a real wire: the real SDK, a delaying proxy, `sbdlq emulator serve`.

For resubmit, purge and peek, in the same run and against the same listener: sbdlq (the
servicebus backend), a naive SDK loop (one message at a time) and an SDK batch loop (what a
careful script does). The proxy adds `rtt_s` to each round trip. After each run the queues
are checked: every message arrived exactly once (resubmit) or went (purge), or was read
once (peek). The naive loop runs on fewer messages (it is slow by design); its figure is
per message, like every ratio here.

Two more rows: resubmit of 1,000 at the same distance beside the floor the --concurrency
bound sets at the round trip measured through the SDK (each message takes a send and a
complete round trip while it counts against the bound), and resubmit of 10,000 with no
added latency, the listener in a process of its own, where the client's CPU time per
message is measured for sbdlq and the SDK batch loop alike.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.common import seed_dlq
from benchmarks.proxy import DelayingProxy

CONN = (
    "Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)


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


class Wire:
    """One store behind `emulator serve` and a delaying proxy; fresh queues for each contender."""

    def __init__(self, store: Path, rtt_s: float) -> None:
        from sbdlq.emulator.engine import Engine

        self.store = store
        self.engine = Engine(store)
        self.port, self.http, self.stop, self.thread = _serve(store)
        self.proxy = DelayingProxy(self.port, rtt_s)
        self.conn = CONN.format(port=self.proxy.port)
        self.names = 0

    def dlq(self, n: int) -> str:
        """A fresh queue whose DLQ holds n messages (ids 0..n-1)."""
        self.names += 1
        name = f"q{self.names}"
        seed_dlq(self.store, name, n)
        return name

    def ids(self, address: str) -> Counter[str]:
        from sbdlq.addresses import parse_address

        return Counter(str(m.message_id) for m in self.engine.peek(parse_address(address), 0, 1_000_000))

    def close(self) -> None:
        self.proxy.close()
        self.stop.set()
        self.thread.join(10)
        self.engine.close()


def _timed(work: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = asyncio.run(work())
    return time.perf_counter() - t0, out


# ------------------------------------------------------------------ contenders


async def _sbdlq(wire: Wire, task: str, q: str) -> int:
    from sbdlq.addresses import EntityPath, parse_address
    from sbdlq.backends.servicebus import ServiceBusBackend
    from sbdlq.operations.browse import iter_messages
    from sbdlq.operations.purge import purge
    from sbdlq.operations.resubmit import resubmit

    backend = ServiceBusBackend(connection_string=wire.conn, timeout_s=60, admin_port=wire.http)
    dlq = parse_address(f"{q}/$deadletterqueue")
    try:
        if task == "resubmit":
            return (await resubmit(backend, dlq, EntityPath(q))).resubmitted
        if task == "purge":
            return (await purge(backend, dlq)).purged
        return len([m async for m in iter_messages(backend, dlq)])
    finally:
        await backend.close()


async def _sdk(wire: Wire, task: str, q: str, batch: int) -> int:
    """The SDK as a script uses it: batch 1 is the naive loop."""
    from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
    from azure.servicebus.aio import ServiceBusClient

    done = 0
    async with ServiceBusClient.from_connection_string(wire.conn) as client:
        mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE if task == "purge" else ServiceBusReceiveMode.PEEK_LOCK
        receiver = client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER, receive_mode=mode)
        async with receiver, client.get_queue_sender(q) as sender:
            if task == "peek":
                seq = 0
                while page := await receiver.peek_messages(max(batch, 1), sequence_number=seq):
                    done += len(page)
                    seq = page[-1].sequence_number + 1
                return done
            while got := await receiver.receive_messages(max_message_count=batch, max_wait_time=2):
                if task == "resubmit":
                    copies = [
                        ServiceBusMessage(b"".join(m.body), message_id=m.message_id, subject=m.subject) for m in got
                    ]
                    await sender.send_messages(copies)
                    for m in got:
                        await receiver.complete_message(m)
                done += len(got)
    return done


async def _measured_rtt(wire: Wire, q: str, tries: int = 7) -> float:
    """The round trip through the SDK, the proxy and the listener: the median of a few one-message peeks."""
    from azure.servicebus import ServiceBusSubQueue
    from azure.servicebus.aio import ServiceBusClient

    async with ServiceBusClient.from_connection_string(wire.conn) as client:
        receiver = client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        async with receiver:
            await receiver.peek_messages(1, sequence_number=1)  # attaches the link
            times = []
            for _ in range(tries):
                t0 = time.perf_counter()
                await receiver.peek_messages(1, sequence_number=1)
                times.append(time.perf_counter() - t0)
    return statistics.median(times)


def resubmit_far(wire: Wire, n: int = 1000, concurrency: int = 32) -> dict[str, Any]:
    """sbdlq's resubmit of n at the proxy's distance, and the floor the --concurrency bound sets."""
    rtt = asyncio.run(_measured_rtt(wire, wire.dlq(1)))
    q = wire.dlq(n)
    seconds, reported = _timed(lambda: _sbdlq(wire, "resubmit", q))
    floor = n / concurrency * 2 * rtt
    return {
        "messages": n,
        "concurrency": concurrency,
        "measured_rtt_ms": round(rtt * 1000, 1),
        "seconds": round(seconds, 2),
        "floor_seconds": round(floor, 2),
        "above_floor_seconds": round(seconds - floor, 2),
        "exactly_once": _check(wire, "resubmit", q, n, reported),
    }


_SERVE = """
import sys
from sbdlq.emulator.amqp.server import serve
serve(sys.argv[1], port=0, http_port=0, ready=lambda a, h: print(a, h, flush=True))
"""


class LocalWire(Wire):
    """`emulator serve` in a process of its own and no proxy: the client's CPU time is its own."""

    def __init__(self, store: Path) -> None:
        from sbdlq.emulator.engine import Engine

        self.store = store
        self.engine = Engine(store)
        self.names = 0
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(store)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if len(line) != 2:
            self.process.kill()
            raise RuntimeError("the AMQP listener did not start")
        self.port, self.http = int(line[0]), int(line[1])
        self.conn = CONN.format(port=self.port)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        self.engine.close()


def resubmit_local(n: int = 10_000) -> dict[str, Any]:
    """Resubmit of n with no added latency: seconds and client CPU ms per message, sbdlq and the SDK batch loop."""
    import azure.servicebus.aio  # noqa: F401 -- imported before timing, for both alike

    import sbdlq.backends.servicebus.backend  # noqa: F401

    row: dict[str, Any] = {"messages": n}
    with tempfile.TemporaryDirectory() as d:
        wire = LocalWire(Path(d) / "local.db")
        try:
            queues = {name: wire.dlq(n) for name in ("sbdlq", "sdk_batch")}
            work = {
                "sbdlq": lambda q: _sbdlq(wire, "resubmit", q),
                "sdk_batch": lambda q: _sdk(wire, "resubmit", q, 100),
            }
            for name, q in queues.items():
                cpu0 = time.process_time()
                seconds, reported = _timed(lambda w=work[name], q=q: w(q))
                cpu = time.process_time() - cpu0
                row[name] = {
                    "seconds": round(seconds, 2),
                    "client_cpu_ms_per_message": round(cpu * 1000 / n, 3),
                    "exactly_once": _check(wire, "resubmit", q, n, reported),
                }
        finally:
            wire.close()
    row["ratio_sdk_batch_vs_sbdlq"] = round(row["sdk_batch"]["seconds"] / row["sbdlq"]["seconds"], 2)
    row["cpu_ratio_sdk_batch_vs_sbdlq"] = round(
        row["sdk_batch"]["client_cpu_ms_per_message"] / row["sbdlq"]["client_cpu_ms_per_message"], 2
    )
    return row


# ------------------------------------------------------------------ checks


def _check(wire: Wire, task: str, q: str, n: int, reported: int) -> bool:
    """Every message arrived exactly once (resubmit), went (purge), or was read once (peek)."""
    dlq = wire.ids(f"{q}/$deadletterqueue")
    if task == "peek":
        return reported == n and sum(dlq.values()) == n
    if task == "purge":
        return reported == n and not dlq
    main = wire.ids(q)
    return reported == n and not dlq and len(main) == n and set(main.values()) == {1}


def run(
    n: int = 200, naive_n: int = 40, rtt_s: float = 0.07, far_n: int = 1000, local_n: int = 10_000
) -> dict[str, Any]:
    """Seconds per task for each contender at `rtt_s`, per-message ratios against sbdlq, and the checks."""
    figures: dict[str, Any] = {"rtt_ms": round(rtt_s * 1000), "messages": n, "naive_messages": naive_n}
    with tempfile.TemporaryDirectory() as d:
        wire = Wire(Path(d) / "wire.db", rtt_s)
        try:
            for task in ("resubmit", "purge", "peek"):
                row: dict[str, Any] = {}
                contenders: list[tuple[str, int, Callable[[str], Awaitable[int]]]] = [
                    ("sbdlq", n, lambda q, t=task: _sbdlq(wire, t, q)),
                    ("sdk_batch", n, lambda q, t=task: _sdk(wire, t, q, 100)),
                    ("sdk_naive", naive_n, lambda q, t=task: _sdk(wire, t, q, 1)),
                ]
                for name, count, work in contenders:
                    q = wire.dlq(count)
                    seconds, reported = _timed(lambda w=work, q=q: w(q))
                    row[name] = {
                        "messages": count,
                        "seconds": round(seconds, 2),
                        "ms_per_message": round(seconds * 1000 / count, 2),
                        "exactly_once": _check(wire, task, q, count, reported),
                    }
                ours = row["sbdlq"]["ms_per_message"]
                for name in ("sdk_batch", "sdk_naive"):
                    row[f"ratio_{name}_vs_sbdlq"] = round(row[name]["ms_per_message"] / ours, 1)
                figures[task] = row
            figures["resubmit_far"] = resubmit_far(wire, far_n)
        finally:
            wire.close()
    figures["resubmit_local"] = resubmit_local(local_n)
    return figures


if __name__ == "__main__":
    import json

    only = sys.argv[1] if len(sys.argv) > 1 else ""
    if only == "far":
        with tempfile.TemporaryDirectory() as d:
            far_wire = Wire(Path(d) / "wire.db", 0.07)
            try:
                print(json.dumps(resubmit_far(far_wire), indent=1))
            finally:
                far_wire.close()
    elif only == "local":
        print(json.dumps(resubmit_local(), indent=1))
    else:
        print(json.dumps(run(), indent=1))
