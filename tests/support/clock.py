"""Time under the test's control: a broker clock to move, and an event loop on virtual time.

Nothing here sleeps. `Clock` is what `Engine(clock=...)` reads. `VirtualTime` runs asyncio
code on a loop whose clock jumps straight to the next timer when nothing else is ready, so
`asyncio.sleep(1.6)` costs no wall time, and the lock keeper's monotonic clock and the
engine's clock follow the same virtual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from collections.abc import Coroutine, Iterator, Mapping
from datetime import datetime
from types import SimpleNamespace
from typing import Any, TypeVar

from sbdlq.timeparse import from_epoch_ms

T = TypeVar("T")
T0 = 1_700_000_000.0
#: Loop iterations without time moving forward before a busy loop is reported.
BUSY_LIMIT = 100_000


class Clock:
    """A broker clock under the test's control: nothing moves it but the test."""

    def __init__(self, start: float = T0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        """Move the broker clock forward."""
        self.t += seconds

    def at(self, offset_s: float = 0.0) -> datetime:
        """The broker's time now (plus an offset) as an aware datetime."""
        value = from_epoch_ms(int(round((self.t + offset_s) * 1000)))
        assert value is not None
        return value


class SkewClock(Clock):
    """The wall clock plus a skew the test moves (for a broker serving real clients)."""

    def __init__(self) -> None:
        super().__init__(0.0)
        #: While set, the clock reads this and stands still: a test reads the broker at an exact
        #: instant however long the reading takes on a loaded machine.
        self.frozen: float | None = None

    def __call__(self) -> float:
        import time

        return time.time() + self.t if self.frozen is None else self.frozen


class BusyLoop(RuntimeError):
    """The code under test spun without letting time pass."""


class _InstantSelector(selectors.BaseSelector):
    """Polls real file descriptors without blocking; a wait for a timer moves the clock instead."""

    def __init__(self, clock: Clock) -> None:
        self._inner = selectors.DefaultSelector()
        self._clock = clock
        self._still = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready:
            return ready
        if timeout is None:  # no timer: only another thread can wake the loop
            return self._inner.select(None)
        if timeout > 0:
            self._clock.advance(timeout)
            self._still = 0
        else:
            self._still += 1
            if self._still > BUSY_LIMIT:
                raise BusyLoop(f"{BUSY_LIMIT} loop iterations without time passing")
        return []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: Clock) -> None:
        super().__init__(_InstantSelector(clock))
        self._virtual = clock
        # A timer due within this much counts as due: float sums must not leave one a hair short.
        self._clock_resolution = 1e-6

    def time(self) -> float:
        return self._virtual.t


class VirtualTime:
    """One event loop on virtual time, and the clocks that follow it.

    `wall` is an epoch-seconds clock for `Engine(clock=...)`; `monotonic` replaces
    time.monotonic in the operations modules that read it while `patched()` is active.
    """

    def __init__(self, start: float = T0) -> None:
        # The loop counts from 0 (small floats add up exactly); `wall` adds the epoch start.
        self.start = start
        self.clock = Clock(0.0)
        self.loop = _VirtualLoop(self.clock)

    def wall(self) -> float:
        """The virtual time as epoch seconds (what a broker engine reads)."""
        return self.start + self.clock.t

    def monotonic(self) -> float:
        """Seconds of virtual time since the loop started."""
        return self.clock.t

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine to completion on virtual time."""
        return self.loop.run_until_complete(coro)

    @contextlib.contextmanager
    def patched(self) -> Iterator[VirtualTime]:
        """Make the resubmit/purge loop (lock keeper, rate limiter, elapsed) read virtual time."""
        import time

        from sbdlq.operations import lock_keeper, move, moving_run, purge, ratelimit, resubmit

        fake = SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
        fake.monotonic = self.monotonic
        # Every operations module that reads the clock (modules move as the code is reshaped).
        modules = [
            m for m in (move, purge, ratelimit, lock_keeper, resubmit, moving_run) if getattr(m, "time", None) is time
        ]
        assert modules, "no operations module reads time.monotonic any more: update VirtualTime.patched"
        saved = [(module, module.time) for module in modules]
        for module, _ in saved:
            module.time = fake  # type: ignore[assignment]
        try:
            yield self
        finally:
            for module, real in saved:
                module.time = real  # type: ignore[assignment]

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, on virtual time: sleeps and lock renewals cost no wall time."""
    vt = VirtualTime()
    try:
        with vt.patched():
            return vt.run(coro)
    finally:
        vt.close()
