"""A TCP proxy on loopback that delays, cuts and stalls: a bad wire in front of `emulator serve`.

The delaying proxy (support/proxy.py) with three faults a test arms before a run:
- `cut_after(n)`: once n bytes have crossed (both ways, all connections), every connection is
  cut (once); the proxy keeps listening, so the SDK reconnects.
- `stall_after(n, for_s)`: once n bytes have crossed, the answers stop: bytes from a client
  still reach the server, bytes from the server are held back (on every connection, new ones
  too) for `for_s` seconds, or until `release()`, then delivered in order.
- latency each way (`rtt_s`), as the delaying proxy adds it.

Faults trigger on the bytes that crossed, not on a clock: a seeded list of byte counts
places them at the same points of a run whatever the machine's speed.
"""

from __future__ import annotations

import asyncio

from support.proxy import DelayingProxy

#: bytes read from a socket at once


class FaultyProxy(DelayingProxy):
    """DelayingProxy plus one cut or stall, triggered by the bytes that have crossed."""

    def __init__(self, target_port: int, rtt_s: float = 0.0) -> None:
        #: bytes forwarded, both ways, on every connection
        self.sent = 0
        self.cuts = 0
        self.stalls = 0
        self._cut_at: int | None = None
        #: bytes after one cut at which the next one strikes, for each cut still to come
        self._cut_gaps: list[int] = []
        #: cut right after the client's Nth large frame (a send's transfer) reached the server
        self._cut_at_large: int | None = None
        #: large frames the client sent (see LARGE_FRAME)
        self.large_frames = 0
        self._stall_at: int | None = None
        self._stall_for: float | None = None
        self._answers: asyncio.Event | None = None  # set: answers flow; clear: held back
        super().__init__(target_port, rtt_s)

        async def make_gate() -> None:
            self._answers = asyncio.Event()
            self._answers.set()

        asyncio.run_coroutine_threadsafe(make_gate(), self._loop).result(10)

    def cut_after(self, sent_bytes: int, *, then_every: int | None = None, times: int = 1) -> None:
        """Cut every connection once this many bytes have crossed (`times` cuts in all, the next
        each `then_every` bytes after the one before)."""
        self._cut_at = sent_bytes
        self._cut_gaps = [then_every or sent_bytes] * (times - 1)

    def cut_after_large_frame(self, n: int) -> None:
        """Cut every connection right after the client's nth frame of LARGE_FRAME bytes or more
        was forwarded to the server: a send (nothing else the client sends is that large) whose
        answer cannot come back, whatever the timing."""
        self._cut_at_large = n

    def stall_after(self, sent_bytes: int, for_s: float | None = None) -> None:
        """Hold the answers back once this many bytes have crossed (for for_s, or until release)."""
        self._stall_at, self._stall_for = sent_bytes, for_s

    def stall(self, for_s: float | None = None) -> None:
        """Hold the answers back now (for for_s, or until release)."""
        self.stall_after(0, for_s)

        async def trigger() -> None:
            self._count(0)

        asyncio.run_coroutine_threadsafe(trigger(), self._loop).result(10)

    def release(self) -> None:
        """Let the held answers go, in order (a stall ends)."""
        gate = self._answers
        if gate is not None:
            self._loop.call_soon_threadsafe(gate.set)

    def _count(self, n: int) -> None:
        """Count bytes forwarded; trigger an armed fault once its threshold is passed."""
        self.sent += n
        if self._cut_at is not None and self.sent >= self._cut_at:
            self._cut_at = self.sent + self._cut_gaps.pop() if self._cut_gaps else None
            self.cuts += 1
            asyncio.get_running_loop().create_task(self._cut_all())
        if self._stall_at is not None and self.sent >= self._stall_at and self._answers is not None:
            self._stall_at = None
            self.stalls += 1
            self._answers.clear()
            if self._stall_for is not None:
                asyncio.get_running_loop().call_later(self._stall_for, self._answers.set)

    async def _cut_all(self) -> None:
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _count_large(self, frames: _Frames, data: bytes) -> None:
        """Count the client's large frames completed by data; cut after the armed one."""
        self.large_frames += frames.feed(data)
        if self._cut_at_large is not None and self.large_frames >= self._cut_at_large:
            self._cut_at_large = None
            self.cuts += 1
            asyncio.get_running_loop().create_task(self._cut_all())

    def _direction_state(self, upward: bool) -> _Frames | None:
        return _Frames() if upward else None

    async def _before_write(self, upward: bool) -> None:
        if not upward and self._answers is not None:
            await self._answers.wait()  # a stall holds the answers; the requests still go

    def _written(self, upward: bool, data: bytes, state: _Frames | None) -> None:
        if state is not None:
            self._count_large(state, data)
        self._count(len(data))


#: bytes from which a frame the client sends counts as large: a send's transfer (16 copies of
#: 2 kB); lock renewals, peeks, dispositions and flow frames stay far below it
LARGE_FRAME = 16_000


class _Frames:
    """Splits one direction of an AMQP connection into frames (protocol headers skipped), counting large ones."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> int:
        """Take the next bytes; how many large frames they completed."""
        self.buffer += data
        large = 0
        while True:
            if self.buffer[:4] == b"AMQP" and len(self.buffer) >= 8:
                del self.buffer[:8]  # a protocol header (AMQP, then SASL's)
                continue
            if len(self.buffer) < 8:
                return large
            size = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < size:
                return large
            large += size >= LARGE_FRAME
            del self.buffer[: max(size, 8)]
