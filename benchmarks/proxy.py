"""A TCP forwarder on loopback that delays every byte by half a round trip each way.

Latency on the wire without a real far namespace: put it in front of `emulator serve` and
point the SDK at its port. Bytes keep their order and the delay is latency, not bandwidth: a
chunk read at t is written at t + rtt/2 whatever else is on its way. Bounded: a few
connections, and a reader waits while too many chunks are on their way. The tests share it
(tests/support/proxy.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

#: connections the proxy serves at once; more are refused
MAX_CONNECTIONS = 64
#: chunks on their way in one direction of one connection before the reader waits
MAX_IN_FLIGHT = 1024


class DelayingProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`, adding `rtt_s` to each round trip."""

    def __init__(self, target_port: int, rtt_s: float = 0.0) -> None:
        self.target_port = target_port
        self.one_way_s = max(0.0, rtt_s) / 2
        self.connections = 0  # accepted since the start
        self._open = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # one per connection being forwarded
        self._thread = threading.Thread(target=self._run, name="delaying-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._server is None:
            raise RuntimeError("the proxy did not start")
        self.port: int = self._server.sockets[0].getsockname()[1]

    def __enter__(self) -> DelayingProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening, cut every connection, and end the thread."""
        if self._thread.is_alive() and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)

    def cut(self) -> None:
        """Cut every connection now (a blip, a broker restart); the proxy keeps listening for new ones."""

        async def cut_all() -> None:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cut_all(), self._loop).result(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        tasks = self._tasks

        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                tasks.add(task)
            try:
                # Cancelled at close: end quietly (Python 3.11's streams would log the CancelledError).
                with contextlib.suppress(asyncio.CancelledError):
                    await self._forward(reader, writer)
            finally:
                if task is not None:
                    tasks.discard(task)

        self._server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        self._ready.set()
        async with self._server:
            await self._stopped.wait()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _forward(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._open >= MAX_CONNECTIONS:
            client_w.close()
            return
        self._open += 1
        upstream_w: asyncio.StreamWriter | None = None
        pumps: list[asyncio.Task[None]] = []
        try:
            upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", self.target_port)
            pumps += [
                asyncio.create_task(self._pump_dir(client_r, upstream_w, upward=True)),
                asyncio.create_task(self._pump_dir(upstream_r, client_w, upward=False)),
            ]
            # Either side closing ends the connection: the other pump is cut.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except OSError:
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._open -= 1
            for w in (client_w, upstream_w):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()

    async def _pump_dir(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, upward: bool) -> None:
        """Copy one direction (upward: client to server), each chunk written one_way_s after it was
        read, in order; a subclass adds its faults through `_before_write` and `_written`."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(MAX_IN_FLIGHT)
        seen = self._direction_state(upward)

        async def read() -> None:
            while data := await source.read(65536):
                await queue.put((time.monotonic() + self.one_way_s, data))
            await queue.put((0.0, b""))

        reading = asyncio.create_task(read())
        try:
            while True:
                due, data = await queue.get()
                if not data:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._before_write(upward)
                sink.write(data)
                await sink.drain()
                self._written(upward, data, seen)
        except OSError:
            return
        finally:
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading

    def _direction_state(self, upward: bool) -> Any:
        """What a subclass keeps about one direction of one connection (none here)."""
        return None

    async def _before_write(self, upward: bool) -> None:
        """Wait, if a subclass holds this direction, before a chunk is written."""

    def _written(self, upward: bool, data: bytes, state: Any) -> None:
        """A chunk was forwarded (a subclass counts it)."""
