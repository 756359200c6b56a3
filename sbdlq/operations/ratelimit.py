"""--rate: at most so many messages per second, shared by the chunks of one run."""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """At most `rate` messages per second (None: unlimited)."""

    def __init__(self, rate: float | None) -> None:
        self.interval = 1.0 / rate if rate else 0.0
        self.next_at = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        """Wait until n more messages fit under the rate."""
        if not self.interval:
            return
        async with self.lock:
            now = time.monotonic()
            start = max(now, self.next_at)
            self.next_at = start + n * self.interval
            if start > now:
                await asyncio.sleep(start - now)
