"""Batch deletes on the broker, several in flight: --max held exactly, a lost answer counted, never repeated."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend
from sbdlq.errors import TransientError
from sbdlq.operations.inflight import Window
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.planning import dlq_left
from sbdlq.operations.retries import RETRY_ATTEMPTS, RETRY_BASE_S, RETRY_CAP_S


@dataclass
class _Round:
    """What the requests of one round came back with (a round ends when none is left in flight)."""

    refused: bool = False
    emptied: bool = False
    progressed: bool = False
    unknown: TransientError | None = None
    failure: BaseException | None = None
    pending: dict[asyncio.Task[int | None], tuple[int, float]] = field(default_factory=dict)

    @property
    def stopping(self) -> bool:
        return self.refused or self.emptied or self.unknown is not None or self.failure is not None


class BrokerDeletes:
    """Delete up to `limit` on the broker's side, with a window of requests in flight.

    Exact under --max: each request is sent with the most it may take (`delete_request_max`,
    or what is left of the limit) reserved, so what is in flight plus what went never passes
    the limit. A request the broker refuses took nothing. A request whose answer was lost
    (TransientError) may have deleted: no request is sent after it, the others in flight are
    waited for, and only then is the DLQ counted, so the count holds every answer there will be;
    what the DLQ went down by since `start` is what this run deleted, and the rest is asked for.
    """

    def __init__(
        self,
        backend: Backend,
        source: Address,
        stats: LoopStats,
        *,
        before: datetime | None,
        concurrency: int,
        tick: Callable[[int], None] | None,
    ) -> None:
        self.backend, self.source, self.stats = backend, source, stats
        self.before = before
        self.tick = tick
        self.window = Window(1 if backend.answers_at_once else concurrency)

    async def run(self, limit: int, start: int | None) -> bool:
        """Delete until `limit` went, nothing older is left, or a stop; False where the broker has no batch delete."""
        stats = self.stats
        attempt = 0
        while stats.handled < limit and stats.aborted is None:
            outcome = await self._round(limit)
            if outcome.failure is not None:
                raise outcome.failure
            if outcome.unknown is not None:
                attempt = 1 if outcome.progressed else attempt + 1
                if attempt >= RETRY_ATTEMPTS:
                    raise outcome.unknown
                stats.retries += 1
                await asyncio.sleep(random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2 ** (attempt - 1))))
                await self._count_what_went(outcome.unknown, limit, start)
                continue
            if outcome.refused:
                return False  # the public path takes the rest
            if outcome.emptied:
                break  # what is left is locked by another receiver, or newer than the cutoff
        return True

    async def _round(self, limit: int) -> _Round:
        """Requests in flight until one says stop, and every one sent has answered."""
        outcome = _Round()
        pending = outcome.pending
        try:
            while True:
                self._fill(outcome, limit)
                if not pending:
                    return outcome
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._take(outcome, task)
        finally:
            if pending:
                # Cancelled from outside (the run is being torn down): none is left running.
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

    def _fill(self, outcome: _Round, limit: int) -> None:
        """Send requests while the window has room and the limit something unreserved."""
        stats, pending = self.stats, outcome.pending
        reserved = sum(n for n, _ in pending.values())
        while not outcome.stopping and stats.aborted is None and len(pending) < self.window.size:
            n = min(self.backend.delete_request_max, limit - stats.handled - reserved)
            if n <= 0:
                return
            call = self.backend.delete_messages(self.source, n, before=self.before)
            pending[asyncio.ensure_future(call)] = (n, self.window.now())
            reserved += n

    def _take(self, outcome: _Round, task: asyncio.Task[int | None]) -> None:
        """One answer: what went is counted as the broker says it."""
        _, sent_at = outcome.pending.pop(task)
        self.window.answered(sent_at, len(outcome.pending))
        error = task.exception()
        if isinstance(error, TransientError):
            outcome.unknown = outcome.unknown or error
        elif error is not None:
            outcome.failure = outcome.failure or error
        else:
            gone = task.result()
            if gone is None:
                outcome.refused = True
            elif gone == 0:
                outcome.emptied = True
            else:
                outcome.progressed = True
                self.stats.handled += gone
                if self.tick:
                    self.tick(gone)

    async def _count_what_went(self, error: TransientError, limit: int, start: int | None) -> None:
        """After a lost answer, with nothing in flight: what the DLQ went down by is what went."""
        stats = self.stats
        left = await dlq_left(self.backend, self.source, stats)
        if start is None or left is None:
            raise error
        went = min(start - left, limit)
        if went > stats.handled:
            if self.tick:
                self.tick(went - stats.handled)
            stats.handled = went
