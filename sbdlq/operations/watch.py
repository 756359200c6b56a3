"""Poll at a fixed rate until told to stop: the loop behind `count --watch`.

The sleep and the clocks are parameters, so tests run the loop on fake time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

T = TypeVar("T")


def utc_now() -> datetime:
    """The wall clock, as an aware UTC datetime."""
    return datetime.now(UTC)


async def every(
    interval_s: float,
    poll: Callable[[], Awaitable[T]],
    show: Callable[[datetime, T], bool],
    *,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    now: Callable[[], datetime] = utc_now,
) -> None:
    """Poll, show the result with the time the poll started, repeat every `interval_s`.

    Stops when `show` returns True. Ticks keep to a fixed rate (a poll's own time is not
    added to the interval); after a poll slower than the interval the next one starts at
    once, without a burst to catch up.
    """
    next_at = monotonic()
    while True:
        at = now()
        if show(at, await poll()):
            return
        next_at += interval_s
        delay = next_at - monotonic()
        if delay < 0:
            next_at, delay = monotonic(), 0.0
        await sleep(delay)
