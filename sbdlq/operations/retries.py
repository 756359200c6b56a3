"""Retrying a broker call: transient failures only, bounded exponential backoff with full jitter."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sbdlq.errors import TransientError
from sbdlq.operations.loop_stats import LoopStats

T = TypeVar("T")

RETRY_ATTEMPTS = 5
RETRY_BASE_S = 0.1
RETRY_CAP_S = 3.0


async def retrying(
    call: Callable[[], Awaitable[T]],
    stats: LoopStats,
    *,
    attempts: int = RETRY_ATTEMPTS,
    before_retry: Callable[[TransientError], Awaitable[None]] | None = None,
) -> T:
    """Retry transient failures with bounded exponential backoff and full jitter.

    `before_retry` runs after the wait, before each retry: where a failed call may have done
    its work all the same, it learns what was done (and raises the error to stop instead).
    """
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except TransientError as exc:
            if attempt == attempts:
                raise
            stats.retries += 1
            await asyncio.sleep(random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2 ** (attempt - 1))))
            if before_retry is not None:
                await before_retry(exc)
    raise AssertionError("unreachable")
