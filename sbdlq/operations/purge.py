"""Purge: delete DLQ messages; with --export, each is written and synced before it is completed."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, SbdlqError
from sbdlq.models import EntityInfo, Message, PurgeResult
from sbdlq.operations.browse import queue_word
from sbdlq.operations.export import Exporter, check_export_target
from sbdlq.operations.move import Plan, retrying
from sbdlq.operations.run import MovingRun, Progress, RunOptions
from sbdlq.paths import Address
from sbdlq.selection import Selection


async def purge(
    backend: Backend,
    source: Address,
    *,
    selection: Selection | None = None,
    max_count: int | None = None,
    export: Path | None = None,
    export_follow_symlinks: bool = False,
    batch_size: int = 500,
    concurrency: int = 32,
    dry_run: bool = False,
    note: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
    confirm: Callable[[int], None] | None = None,
) -> PurgeResult:
    """Delete matching messages of a DLQ (or transfer DLQ).

    `confirm(n)` is called once the plan is known and before anything is deleted; it
    raises to cancel.
    """
    # In RunOptions' field order.
    options = RunOptions(selection or Selection(), max_count, batch_size, concurrency, dry_run, note, progress)
    run = Purge(backend, source, options, export=export, follow_symlinks=export_follow_symlinks, confirm=confirm)
    return await run.run()


class Purge(MovingRun[PurgeResult]):
    """Export each message (when asked), then complete it."""

    LOST_ARE_DONE = False

    def __init__(
        self,
        backend: Backend,
        source: Address,
        options: RunOptions,
        *,
        export: Path | None,
        follow_symlinks: bool = False,
        confirm: Callable[[int], None] | None,
    ) -> None:
        super().__init__(backend, source, PurgeResult(dry_run=options.dry_run), options)
        self.export = export
        self.follow_symlinks = follow_symlinks
        self.confirm = confirm
        self.exporter: Exporter | None = None
        if export is not None:
            # One writer takes whole batches: one fsync per batch, lines in order. Without an
            # export, deletes overlap like resubmit's sends.
            self.concurrency = self.chunk_size = options.batch_size

    async def check(self) -> EntityInfo:
        if self.options.batch_size < 1:
            raise BadInput("--batch-size must be at least 1")
        if self.export is not None:
            check_export_target(self.export, follow_symlinks=self.follow_symlinks)
            if not self.options.dry_run and os.path.lexists(self.export):
                # Locked before the plan: a second run onto an existing file refuses up front. A
                # new file is created (and locked) only when there is something to write.
                self.exporter = Exporter(self.export, follow_symlinks=self.follow_symlinks)
        return await self.backend.get_entity(self.source.entity)

    async def run(self) -> PurgeResult:
        """The run, with the export file locked from the check to the end."""
        try:
            return await super().run()
        finally:
            if self.exporter is not None:
                self.exporter.close()
                self.exporter = None

    def plan_line(self) -> str:
        verb = "export and delete" if self.export else "delete"
        return f"plan: {verb} {self.result.selected} message(s) from {self.source}"

    def before_moving(self) -> None:
        if self.confirm is not None:
            self.confirm(self.result.selected)

    async def move(self, plan: Plan, info: EntityInfo, tick: Callable[[int], None] | None) -> None:
        if self.export is None and self.selection.is_empty:
            await self.discard(plan.selected, tick)
            return
        if self.export is not None and self.exporter is None:
            self.exporter = Exporter(self.export, follow_symlinks=self.follow_symlinks)
        await super().move(plan, info, tick)

    async def discard(self, limit: int, tick: Callable[[int], None] | None) -> None:
        """Nothing to keep and nothing to choose: delete on receive, in large batches."""
        stats = self.stats
        while stats.handled < limit and stats.aborted is None:
            want = min(self.options.batch_size, limit - stats.handled)
            gone = await retrying(partial(self.backend.discard, self.source, want), stats)
            if not gone:
                break
            stats.handled += gone
            if tick:
                tick(gone)

    async def settle(self, chunk: list[Message]) -> list[Message]:
        """Export (when asked) then complete; returns what it left in the DLQ."""
        stats = self.stats
        if self.exporter is not None:
            try:
                self.exporter.write(chunk)
            except SbdlqError as exc:
                # Not exported, so not deleted; a full disk won't get better for the next chunk.
                stats.failed += len(chunk)
                stats.abort(exc.message)
                return chunk
            self.result.exported += len(chunk)
        try:
            lost = await retrying(lambda: self.backend.complete(self.source, chunk), stats)
        except SbdlqError as exc:
            stats.failed += len(chunk)
            stats.abort(f"delete failed: {exc.message}")
            return chunk
        stats.handled += len(chunk) - len(lost)
        if lost:
            stats.lock_lost += len(lost)
            stats.error(f"{len(lost)} message(s) stayed in the {queue_word(self.source)} (lock lost before delete)")
        return lost
