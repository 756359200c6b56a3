"""The one skeleton of a moving run (resubmit, purge): check, plan, note, dry run, loop, result.

A run subclasses `MovingRun` and fills in what is its own: the checks before anything is
read, the plan line, and `settle`, the action on a chunk of locked messages (send then
complete, export then complete). The order of the steps, the dry-run return and the
accounting of `LoopStats` into the result are written here once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.errors import BadInput, SbdlqError
from sbdlq.models import EntityInfo, Message
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.move import LockedLoop
from sbdlq.operations.planning import Plan, dlq_left, plan_run, report_unreceived
from sbdlq.operations.settle_recovery import sequences_in
from sbdlq.operations.stopping import RunInterrupted, Stopper, run_stoppable
from sbdlq.results import RunResult
from sbdlq.selection import Selection

R = TypeVar("R", bound=RunResult)

#: Above this many messages of its own left in the DLQ, a run does not probe which others are locked elsewhere.
PROBE_OWN_MAX = 1000

#: Called with the total (None while it is unknown); returns the tick called with each step done.
Progress = Callable[[int | None], Callable[[int], None]]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The knobs every moving run takes."""

    selection: Selection = field(default_factory=Selection)
    max_count: int | None = None
    batch_size: int = 100
    concurrency: int = 32
    dry_run: bool = False
    note: Callable[[str], None] = lambda _: None
    progress: Progress | None = None


class MovingRun(ABC, Generic[R]):
    """Takes matching DLQ messages under lock and settles each after its action succeeded."""

    #: Where the run sends copies (its sender link opens with the receiver's); None: nowhere.
    send_target: EntityPath | None = None

    def __init__(self, backend: Backend, source: Address, result: R, options: RunOptions) -> None:
        self.backend = backend
        self.source = source
        self.result = result
        self.options = options
        self.selection = options.selection
        self.note = options.note
        # Messages per action call; None: `concurrency` (see LockedLoop).
        self.chunk_size: int | None = None
        self.concurrency = options.concurrency
        self.stats = LoopStats()

    @abstractmethod
    async def check(self) -> EntityInfo:
        """Refuse a run that cannot go well before anything is read; returns the source entity."""

    @abstractmethod
    def plan_line(self) -> str:
        """`plan: ...`, without the dry-run mark."""

    def explain(self) -> None:
        """Notes after the plan line (none by default)."""

    def before_moving(self) -> None:
        """Called once the plan is known and before anything moves; raises to cancel."""

    @abstractmethod
    async def settle(self, chunk: list[Message]) -> list[Message]:
        """Act on a chunk and settle what succeeded; returns the messages it left unsettled."""

    async def run(self) -> R:
        """Check, plan, say so, and unless it is a dry run, move and account.

        Raises RunInterrupted, carrying the partial result, when SIGINT or SIGTERM stopped it.
        """
        started = time.monotonic()
        try:
            return await run_stoppable(self._run, Stopper(self.stats.abort), self._partial)
        finally:
            self.result.elapsed_s = time.monotonic() - started

    def _partial(self) -> R:
        """The result so far, for a run a signal stopped: what it did not reach was not tried."""
        self.account(stopped=True)
        return self.result

    async def _run(self, stopper: Stopper) -> R:
        dry_run = self.options.dry_run
        # The links take about ten round trips to attach: attach them while the checks and
        # the plan read the entity (independent round trips), not after.
        links = None if dry_run else asyncio.create_task(self._open_links())
        try:
            return await self._checked_run(stopper, links)
        finally:
            if links is not None and not links.done():
                links.cancel()
            if links is not None:
                with contextlib.suppress(BaseException):
                    await links

    async def _open_links(self) -> None:
        """Attach the receiver and the sender before the first receive, within the run's timeout."""
        # A receive's short wait must not be spent attaching its link.
        await self.backend.open_links(self.source, ReceiveMode.PEEK_LOCK, self.send_target)

    async def _checked_run(self, stopper: Stopper, links: asyncio.Task[None] | None) -> R:
        info = await self.check()
        dry_run, progress = self.options.dry_run, self.options.progress
        plan = await plan_run(
            self.backend,
            self.source,
            self.selection,
            max_count=self.options.max_count,
            scan=dry_run,
            progress=progress,
        )
        self.result.selected = plan.selected
        self.result.not_matching = plan.passed_over
        self.note(self.plan_line() + (" (dry run)" if dry_run else ""))
        self.result.hint = plan.hint
        self.explain()
        if dry_run or plan.selected == 0:
            return self.result
        self.before_moving()
        tick = progress(plan.selected) if progress else None
        stopper.moving = True
        try:
            if links is not None:
                await links
            await self.move(plan, info, tick)
        except BadInput:
            raise  # a bad selection (a --body-regex over its budget) is a usage error, exit 2
        except SbdlqError as exc:
            # The loop has wound down (chunks in flight finished, the rest released): a
            # failing broker or store ends the run with its partial summary, not a bare error.
            self.stats.abort(exc.message)
        await self.check_left()
        await self.recount()
        self.account(stopped=stopper.signum is not None)
        if stopper.signum is not None:
            raise RunInterrupted(self.result, stopper.signum)
        return self.result

    async def move(self, plan: Plan, info: EntityInfo, tick: Callable[[int], None] | None) -> None:
        """The batched peek-lock loop with `settle` as its action."""
        loop = LockedLoop(
            self.backend,
            self.source,
            selection=self.selection,
            action=self.settle,
            stats=self.stats,
            lock_duration_s=info.lock_duration_s,
            batch_size=self.options.batch_size,
            concurrency=self.concurrency,
            chunk_size=self.chunk_size,
            on_done=tick,
            # The user's --concurrency, even where a run widens its chunks (purge --export).
            large_bodies=self.options.concurrency,
        )
        await loop.run(limit=plan.selected, last_sequence=plan.last_sequence)

    async def check_left(self) -> None:
        """Before the report says originals stayed beside their copy, look: one peek by sequence
        number. Those gone were completed after all (the complete's answer was lost, as when the
        answers stop while the requests still reach the broker); when the peek fails too, the
        report says it could not tell rather than that they stayed."""
        stats = self.stats
        # An original whose copy's send got no answer was never completed by the run: not re-credited.
        completed = [s for s in stats.left_sequences if s not in stats.unconfirmed_sequences]
        if not completed:
            return
        try:
            there = await sequences_in(self.backend, self.source, completed, stats)
        except SbdlqError as exc:
            stats.unchecked_reason = exc.message
            return
        stats.gone_after_all(set(completed) - there)

    def kept_back(self) -> int:
        """Messages the run chose to leave in the DLQ (resubmit: copies no subscription takes)."""
        return 0

    async def recount(self) -> None:
        """Selected messages the run never received but that are still in the DLQ fail the run."""
        stats = self.stats
        if not self.selection.is_empty or stats.aborted is not None:
            return  # a count cannot tell matches apart; an aborted run accounts for the rest itself
        kept = self.kept_back()
        own = stats.failed + stats.left_beside_copy + kept
        missing = self.result.selected - (stats.handled + own)
        if missing <= 0:
            return
        left = await dlq_left(self.backend, self.source, stats)
        # What the run itself left in the DLQ (failed, left beside a copy, kept back) is in the
        # count too; the rest of what is missing went to another receiver.
        still = min(missing, (left or 0) - own)
        if still > 0:
            still = min(still, await self.receivable(still, own))
        if still > 0:
            stats.not_tried += still
            stats.error(f"{still} selected message(s) are still in {self.source}: not received before the run ended")

    async def receivable(self, still: int, own: int) -> int:
        """How many of `still` counted messages a receive gets now: the rest are locked by another receiver.

        `own`: messages the run itself left in the DLQ (released, so receivable too). Those
        received are abandoned at once: the probe moves nothing. When it cannot tell, `still`.
        """
        if own > PROBE_OWN_MAX:
            return still
        backend, source = self.backend, self.source
        try:
            got = await backend.receive(source, still + own, mode=ReceiveMode.PEEK_LOCK, max_wait_s=1.0)
        except SbdlqError:
            return still
        if got:
            with contextlib.suppress(SbdlqError):
                await backend.abandon(source, got)
        return max(0, len(got) - own)

    def account(self, *, stopped: bool = False) -> None:
        """Copy what the loop did into the result, each selected message in one count; say so
        when selected messages never came.

        `stopped`: a signal ended the run. What a stopped or aborted run did not reach was not
        tried (still in the DLQ); what an unhindered run never received went elsewhere.
        """
        r, stats = self.result, self.stats
        r.done = stats.handled
        r.failed = stats.failed
        r.not_tried = stats.not_tried
        r.left_beside_copy = stats.left_beside_copy
        r.left_sequences = list(stats.left_sequences)
        r.unchecked_reason = stats.unchecked_reason
        r.unconfirmed_sequences = sorted(stats.unconfirmed_sequences)
        r.not_received = 0
        r.retries = stats.retries
        r.errors = stats.errors
        r.sdk_fallbacks = self.backend.sdk_fallbacks
        rest = max(0, r.unaccounted())
        if stopped or stats.aborted is not None:
            r.not_tried += rest
            return
        # Let go after their lock was lost and not received again: untouched, not tried.
        let_go = min(rest, stats.let_go)
        r.not_tried += let_go
        r.not_received = rest - let_go
        report_unreceived(r.selected, r.not_received, self.source, self.note)
