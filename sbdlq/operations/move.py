"""The batched peek-lock loop that resubmit and purge share.

Rules it keeps, whatever the action: a message is settled only after its action
succeeded (send then complete, export then complete); at most `concurrency` messages are
between action and settlement at any moment, so a kill -9 duplicates no more than that;
messages the selection skips keep their lock until the run ends (so the loop never
receives them twice) and are then released; locks are renewed before they lapse.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.errors import SbdlqError, TransientError
from sbdlq.models import Message
from sbdlq.paths import Address
from sbdlq.selection import Selection

T = TypeVar("T")

RETRY_ATTEMPTS = 5
RETRY_BASE_S = 0.1
RETRY_CAP_S = 3.0


@dataclass
class LoopStats:
    """What the loop did; the operations turn it into their results."""

    handled: int = 0
    failed: int = 0
    skipped: int = 0
    retries: int = 0
    lock_lost: int = 0
    errors: list[str] = field(default_factory=list)

    def error(self, text: str) -> None:
        if text not in self.errors and len(self.errors) < 5:
            self.errors.append(text)


async def retrying(call: Callable[[], Awaitable[T]], stats: LoopStats, *, attempts: int = RETRY_ATTEMPTS) -> T:
    """Retry transient failures with bounded exponential backoff and full jitter."""
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except TransientError:
            if attempt == attempts:
                raise
            stats.retries += 1
            await asyncio.sleep(random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2 ** (attempt - 1))))
    raise AssertionError("unreachable")


class RateLimiter:
    """At most `rate` messages per second (None: unlimited)."""

    def __init__(self, rate: float | None) -> None:
        self.interval = 1.0 / rate if rate else 0.0
        self.next_at = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        if not self.interval:
            return
        async with self.lock:
            now = time.monotonic()
            start = max(now, self.next_at)
            self.next_at = start + n * self.interval
            if start > now:
                await asyncio.sleep(start - now)


class LockKeeper:
    """Renews the locks of held messages a third of a lock duration before they lapse."""

    def __init__(self, backend: Backend, address: Address, stats: LoopStats, lock_duration_s: float) -> None:
        self.backend = backend
        # Renew when a third of the lock duration is left (at least a second).
        self.margin = timedelta(seconds=max(1.0, lock_duration_s / 3))
        self.address = address
        self.stats = stats
        self.held: dict[str, Message] = {}
        self.lost: set[str] = set()
        self.task: asyncio.Task[None] | None = None

    def hold(self, messages: Sequence[Message]) -> None:
        for m in messages:
            if m.lock_token:
                self.held[m.lock_token] = m
        if self.task is None and self.held:
            self.task = asyncio.create_task(self._run())

    def release(self, messages: Sequence[Message]) -> None:
        for m in messages:
            if m.lock_token:
                self.held.pop(m.lock_token, None)

    async def _run(self) -> None:
        while True:
            due = self._due()
            if not due:
                await asyncio.sleep(0.5)
                continue
            try:
                lost = await retrying(lambda d=due: self.backend.renew_locks(self.address, d), self.stats)  # type: ignore[misc]
            except SbdlqError as exc:
                self.stats.error(f"lock renewal failed: {exc.message}")
                await asyncio.sleep(1.0)
                continue
            for m in lost:
                if m.lock_token:
                    self.lost.add(m.lock_token)
                    self.held.pop(m.lock_token, None)

    def _due(self) -> list[Message]:
        now = datetime.now(UTC)
        due = []
        for m in self.held.values():
            if m.locked_until is None:
                continue
            if m.locked_until - now <= self.margin:
                due.append(m)
        return due

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
            self.task = None


Action = Callable[[list[Message]], Awaitable[None]]


async def locked_loop(
    backend: Backend,
    source: Address,
    *,
    selection: Selection,
    limit: int,
    last_sequence: int | None,
    batch_size: int,
    concurrency: int,
    action: Action,
    stats: LoopStats,
    lock_duration_s: float = 60.0,
    chunk_size: int | None = None,
    on_done: Callable[[int], None] | None = None,
) -> None:
    """Receive batches under lock; run `action` on chunks of matches; release the rest at the end.

    `action(chunk)` must do the work and settle the chunk (or leave it to lapse on failure),
    updating `stats`. `limit` bounds how many matches are taken; `last_sequence`, when
    known from a scan, ends the run once the loop is past the last match.
    """
    chunk = max(1, min(chunk_size or max(1, concurrency // 4), concurrency))
    calls = asyncio.Semaphore(max(1, concurrency // chunk))
    keeper = LockKeeper(backend, source, stats, lock_duration_s)
    skipped: list[Message] = []
    taken = 0
    pending: set[asyncio.Task[None]] = set()

    async def run_chunk(items: list[Message]) -> None:
        try:
            await action(items)
        finally:
            keeper.release(items)
            calls.release()
            if on_done:
                on_done(len(items))

    try:
        while taken < limit:
            want = min(batch_size, limit - taken) if selection.is_empty else batch_size
            batch = await retrying(
                lambda w=want: backend.receive(source, w, mode=ReceiveMode.PEEK_LOCK, max_wait_s=1.0),  # type: ignore[misc]
                stats,
            )
            if not batch:
                break
            keeper.hold(batch)
            chosen: list[Message] = []
            beyond: list[Message] = []
            for m in batch:
                if last_sequence is not None and m.sequence_number > last_sequence:
                    beyond.append(m)
                elif taken < limit and selection.matches(m):
                    chosen.append(m)
                    taken += 1
                else:
                    skipped.append(m)
            if beyond:
                # Past the last match the scan found: release them now, they are not ours.
                keeper.release(beyond)
                await _release(backend, source, beyond, stats)
            for i in range(0, len(chosen), chunk):
                await calls.acquire()
                task = asyncio.create_task(run_chunk(chosen[i : i + chunk]))
                pending.add(task)
                task.add_done_callback(pending.discard)
            if pending:
                await asyncio.gather(*pending)
            if beyond:
                break
    finally:
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await keeper.stop()
        stats.lock_lost += len(keeper.lost)
        stats.skipped += len(skipped)
        # Released, not completed: skipped messages stay in the DLQ untouched.
        with contextlib.suppress(SbdlqError):
            await _release(backend, source, [m for m in skipped if m.lock_token not in keeper.lost], stats)


async def _release(backend: Backend, source: Address, messages: list[Message], stats: LoopStats) -> None:
    for i in range(0, len(messages), 500):
        part = messages[i : i + 500]
        await retrying(lambda p=part: backend.abandon(source, p), stats)  # type: ignore[misc]


def plan_limit(max_count: int | None, available: int) -> int:
    """How many messages a run may take: --max, bounded by what was there at the start."""
    bound = max(available, 0)
    return bound if max_count is None else min(max_count, bound)
