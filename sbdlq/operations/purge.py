"""Purge: delete DLQ messages; with --export, each is written and synced before it is completed."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.errors import BadInput, OperationFailed, SbdlqError, TransientError
from sbdlq.models import EntityInfo, Message
from sbdlq.operations.broker_deletes import BrokerDeletes
from sbdlq.operations.browse import queue_word
from sbdlq.operations.export import LazyExporter, check_export_target
from sbdlq.operations.move import EMPTY_RETRIES
from sbdlq.operations.moving_run import MovingRun, Progress, RunOptions
from sbdlq.operations.planning import Plan, dlq_left
from sbdlq.operations.retries import retrying
from sbdlq.operations.settle_recovery import complete_or_left
from sbdlq.results import PurgeResult
from sbdlq.selection import Selection


async def purge(
    backend: Backend,
    source: Address,
    *,
    selection: Selection | None = None,
    max_count: int | None = None,
    export: Path | None = None,
    export_follow_symlinks: bool = False,
    export_new: bool = False,
    batch_size: int = 500,
    concurrency: int = 32,
    dry_run: bool = False,
    note: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
    confirm: Callable[[int], None] | None = None,
) -> PurgeResult:
    """Delete matching messages of a DLQ (or transfer DLQ).

    `confirm(n)` is called once the plan is known and before anything is deleted; it
    raises to cancel. `export_new`: the export file must not exist (apply's one file per step).
    """
    # In RunOptions' field order.
    options = RunOptions(selection or Selection(), max_count, batch_size, concurrency, dry_run, note, progress)
    run = Purge(
        backend, source, options, export=export, follow_symlinks=export_follow_symlinks, new=export_new, confirm=confirm
    )
    return await run.run()


class Purge(MovingRun[PurgeResult]):
    """Export each message (when asked), then complete it, then mark its record deleted.

    With --export a chunk is a whole batch (one fsync and one delete per batch), so a kill
    between the export and the delete leaves at most --batch-size messages both in the file and
    in the DLQ; their records stay marked `"sbdlq_deleted": 0`, and replay holds them back.
    """

    def __init__(
        self,
        backend: Backend,
        source: Address,
        options: RunOptions,
        *,
        export: Path | None,
        follow_symlinks: bool = False,
        new: bool = False,
        confirm: Callable[[int], None] | None,
    ) -> None:
        super().__init__(backend, source, PurgeResult(dry_run=options.dry_run), options)
        self.export = export
        self.follow_symlinks = follow_symlinks
        self.confirm = confirm
        #: The export file, made when the first record is written: a run that deletes nothing makes none.
        self.file = None if export is None else LazyExporter(export, follow_symlinks=follow_symlinks, new=new)
        if export is not None:
            # One writer takes whole batches: one fsync per batch, lines in order. Without an
            # export, deletes overlap like resubmit's sends.
            self.concurrency = self.chunk_size = options.batch_size

    async def check(self) -> EntityInfo:
        if self.options.batch_size < 1:
            raise BadInput("--batch-size must be at least 1")
        if self.file is not None:
            path = self.file.path
            if self.file.new and os.path.lexists(path):
                raise OperationFailed(f"cannot create export file {path}: it exists; nothing was deleted")
            if not self.file.new:
                check_export_target(path, follow_symlinks=self.follow_symlinks)
            if not self.options.dry_run and os.path.lexists(path):
                # Locked before the plan: a second run onto an existing file refuses up front. A
                # new file is created (and locked) only when its first record is written.
                self.file.open()
        return await self.backend.get_entity(self.source.entity)

    async def run(self) -> PurgeResult:
        """The run, with the export file locked from the check (or its first record) to the end."""
        try:
            return await super().run()
        finally:
            if self.file is not None:
                self.file.close()

    def plan_line(self) -> str:
        verb = "export and delete" if self.export else "delete"
        return f"plan: {verb} {self.result.selected} message(s) from {self.source}"

    def before_moving(self) -> None:
        if self.confirm is not None:
            self.confirm(self.result.selected)

    async def move(self, plan: Plan, info: EntityInfo, tick: Callable[[int], None] | None) -> None:
        if self.export is None and self.selection.is_empty:
            if not await self.delete_on_broker(plan.selected, None, plan.counted, tick):
                await self.discard(plan.selected, tick)
            return
        cutoff = _only_older_than(self.selection)
        if (
            self.export is None
            and cutoff is not None
            and await self.delete_on_broker(plan.selected, cutoff, plan.counted, tick)
        ):
            return
        # What a batch delete took before it was given up counts against --max.
        await super().move(dataclasses.replace(plan, selected=plan.selected - self.stats.handled), info, tick)

    async def delete_on_broker(
        self, limit: int, before: datetime | None, counted: int | None, tick: Callable[[int], None] | None
    ) -> bool:
        """Delete on the broker's side (batch delete), counting what went; False where it has none.

        `counted`: the DLQ's count the plan saw (None: counted here, before the first delete).
        """
        start = counted if counted is not None else await dlq_left(self.backend, self.source, self.stats)
        deletes = BrokerDeletes(
            self.backend, self.source, self.stats, before=before, concurrency=self.options.concurrency, tick=tick
        )
        return await deletes.run(limit, start)

    async def discard(self, limit: int, tick: Callable[[int], None] | None) -> None:
        """Nothing to keep and nothing to choose: delete on receive, in large batches.

        What was deleted is what the count went down by: messages delivered after a receive
        call gave up are deleted by the broker all the same, and the receiver drops them.
        """
        stats, backend, source = self.stats, self.backend, self.source
        batch = self.options.batch_size
        await backend.open_links(source, ReceiveMode.RECEIVE_AND_DELETE)
        before, earlier = await dlq_left(backend, source, stats), stats.handled
        empty = 0
        while stats.handled < limit and stats.aborted is None:
            gone = await self.deleting(lambda n: backend.discard(source, min(batch, n)), limit, before, tick)
            if gone:
                empty = 0
                stats.handled += gone
                if tick:
                    tick(gone)
                continue
            empty += 1
            left = await dlq_left(backend, source, stats)
            if empty > EMPTY_RETRIES or not left or (before is not None and earlier + before - left >= limit):
                break
        after = await dlq_left(backend, source, stats)
        counted = before - after if before is not None and after is not None else 0
        stats.handled = max(stats.handled, min(limit, earlier + counted))

    async def deleting(
        self,
        call: Callable[[int], Awaitable[int | None]],
        limit: int,
        start: int | None,
        tick: Callable[[int], None] | None,
    ) -> int | None:
        """One delete call for what is left of `limit` (batch delete or receive-and-delete): its answer.

        A delete is not retried as it was: a call whose answer was lost (a timeout, a reset)
        may have deleted all the same, and repeating it would delete more than the run was
        asked to. After a transient failure the DLQ is counted: what it went down by since
        `start` is what this run has deleted, and the retry asks only for the rest. When the
        count cannot say (no start count, or it fails too), the error stops the run.
        """
        stats = self.stats

        async def count_what_went(error: TransientError) -> None:
            left = await dlq_left(self.backend, self.source, stats)
            if start is None or left is None:
                raise error
            went = min(start - left, limit)
            if went > stats.handled:
                if tick:
                    tick(went - stats.handled)
                stats.handled = went

        async def the_rest() -> int | None:
            return await call(limit - stats.handled) if stats.handled < limit else 0

        return await retrying(the_rest, stats, before_retry=count_what_went)

    async def settle(self, chunk: list[Message]) -> list[Message]:
        """Export (when asked) then complete, then mark what went; returns what it left in the DLQ."""
        stats = self.stats
        marks: list[int] = []
        if self.file is not None:
            try:
                marks = self.file.open().write_pending(chunk)
            except SbdlqError as exc:
                # Not exported, so not deleted; a full disk won't get better for the next chunk.
                stats.failed += len(chunk)
                stats.abort(exc.message)
                return chunk
            self.result.exported += len(chunk)
        left, error = await complete_or_left(self.backend, self.source, chunk, stats)
        stats.handled += len(chunk) - len(left)
        if self.file is not None:
            self.mark_deleted(chunk, marks, left)
        if left and self.file is not None:
            # In the export file and still in the DLQ: a second purge would export them again.
            stats.left_beside(left)
        else:
            stats.failed += len(left)
        if error is not None:
            stats.abort(f"delete failed: {error.message}")
        elif left:
            stats.stayed(f"{len(left)} message(s) stayed in the {queue_word(self.source)} (lock lost before delete)")
        return left

    def mark_deleted(self, chunk: list[Message], marks: list[int], left: list[Message]) -> None:
        """Set the records of the messages that left the DLQ to deleted (those `left` stay 0)."""
        assert self.file is not None
        stayed = {m.sequence_number for m in left}
        gone = [at for m, at in zip(chunk, marks, strict=True) if m.sequence_number not in stayed]
        try:
            self.file.open().confirm(gone)
        except SbdlqError as exc:
            # Deleted all the same: the records stay marked 0, which only makes replay hold them back.
            self.stats.error(f"{exc.message} (replay holds them back as possibly still in the DLQ)")


def _only_older_than(selection: Selection) -> datetime | None:
    """The cutoff of a selection that is --older-than alone (the broker's batch delete takes it), else None."""
    if selection.enqueued_before is None:
        return None
    return selection.enqueued_before if dataclasses.replace(selection, enqueued_before=None).is_empty else None
