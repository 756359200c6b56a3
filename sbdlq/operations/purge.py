"""Purge: delete DLQ messages; with --export, each is written and synced before it is completed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, SbdlqError
from sbdlq.models import Message, PurgeResult
from sbdlq.operations.browse import queue_word
from sbdlq.operations.export import Exporter
from sbdlq.operations.move import LoopStats, locked_loop, plan_run, report_unreceived, retrying
from sbdlq.paths import Address
from sbdlq.selection import Selection


async def purge(
    backend: Backend,
    source: Address,
    *,
    selection: Selection | None = None,
    max_count: int | None = None,
    export: Path | None = None,
    batch_size: int = 500,
    concurrency: int = 32,
    dry_run: bool = False,
    note: Callable[[str], None] = lambda _: None,
    progress: Callable[[int | None], Callable[[int], None]] | None = None,
    confirm: Callable[[int], None] | None = None,
) -> PurgeResult:
    """Delete matching messages of a DLQ (or transfer DLQ).

    `confirm(n)` is called once the plan is known and before anything is deleted; it
    raises to cancel.
    """
    started = time.monotonic()
    sel = selection or Selection()
    if batch_size < 1:
        raise BadInput("--batch-size must be at least 1")
    info = await backend.get_entity(source.entity)
    result = PurgeResult(dry_run=dry_run)
    plan = await plan_run(backend, source, sel, max_count=max_count, scan=dry_run, progress=progress)
    limit = result.selected = plan.selected
    last_sequence = plan.last_sequence
    verb = "export and delete" if export else "delete"
    note(f"plan: {verb} {result.selected} message(s) from {source}" + (" (dry run)" if dry_run else ""))
    if dry_run or limit == 0:
        result.elapsed_s = time.monotonic() - started
        return result
    if confirm is not None:
        confirm(result.selected)

    stats = LoopStats()
    tick = progress(limit) if progress else None
    if export is None and sel.is_empty:
        # Nothing to keep and nothing to choose: delete on receive, in large batches.
        while result.purged < limit:
            want = min(batch_size, limit - result.purged)
            gone = await retrying(lambda w=want: backend.discard(source, w), stats)  # type: ignore[misc]
            if not gone:
                break
            result.purged += gone
            if tick:
                tick(gone)
        report_unreceived(result.selected, result.purged, source, note)
        result.retries = stats.retries
        result.elapsed_s = time.monotonic() - started
        return result

    exporter = Exporter(export) if export is not None else None

    async def settle(chunk: list[Message]) -> list[Message]:
        """Export (when asked) then complete; returns what it left in the DLQ."""
        if exporter is not None:
            try:
                exporter.write(chunk)
            except SbdlqError as exc:
                # Not exported, so not deleted; a full disk won't get better for the next chunk.
                stats.failed += len(chunk)
                stats.abort(exc.message)
                return chunk
            result.exported += len(chunk)
        try:
            lost = await retrying(lambda: backend.complete(source, chunk), stats)
        except SbdlqError as exc:
            stats.failed += len(chunk)
            stats.abort(f"delete failed: {exc.message}")
            return chunk
        stats.handled += len(chunk) - len(lost)
        if lost:
            stats.lock_lost += len(lost)
            stats.error(f"{len(lost)} message(s) stayed in the {queue_word(source)} (lock lost before delete)")
        return lost

    try:
        await locked_loop(
            backend,
            source,
            selection=sel,
            limit=limit,
            last_sequence=last_sequence,
            batch_size=batch_size,
            # With an export, one writer takes whole batches: one fsync per batch, lines in
            # order. Without, deletes overlap like resubmit's sends.
            concurrency=batch_size if exporter else concurrency,
            chunk_size=batch_size if exporter else None,
            action=settle,
            stats=stats,
            lock_duration_s=info.lock_duration_s,
            on_done=tick,
        )
    finally:
        if exporter is not None:
            exporter.close()
    result.purged = stats.handled
    result.failed = stats.failed
    if stats.aborted is not None:
        # Not attempted after the stop: still in the DLQ, so they count as failed.
        result.failed = max(stats.failed, result.selected - stats.handled - stats.lock_lost)
    result.skipped = stats.skipped
    result.retries = stats.retries
    result.lock_lost = stats.lock_lost
    result.errors = stats.errors
    report_unreceived(result.selected, result.purged + result.failed + result.lock_lost, source, note)
    result.elapsed_s = time.monotonic() - started
    return result
