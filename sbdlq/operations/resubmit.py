"""Resubmit: copy DLQ messages back to their entity (or another), then complete the originals."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, InvalidOperation, SbdlqError
from sbdlq.models import (
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    RESUBMITTED_FROM,
    Message,
    OutboundMessage,
    ResubmitResult,
)
from sbdlq.operations.browse import queue_word
from sbdlq.operations.move import LoopStats, RateLimiter, locked_loop, plan_run, report_unreceived, retrying
from sbdlq.paths import Address, EntityPath
from sbdlq.selection import Selection


def make_copy(
    m: Message, *, source: Address | str, new_message_id: bool = False, keep_dead_letter_properties: bool = False
) -> OutboundMessage:
    """A fresh message carrying what DESIGN §4 keeps, minus the dead-letter marks."""
    props = dict(m.application_properties)
    if not keep_dead_letter_properties:
        props.pop(DEAD_LETTER_REASON, None)
        props.pop(DEAD_LETTER_DESCRIPTION, None)
    props[RESUBMITTED_FROM] = f"{source}:{m.sequence_number}"
    return OutboundMessage(
        body=m.body,
        message_id=uuid.uuid4().hex if new_message_id else m.message_id,
        content_type=m.content_type,
        correlation_id=m.correlation_id,
        subject=m.subject,
        to=m.to,
        reply_to=m.reply_to,
        reply_to_session_id=m.reply_to_session_id,
        session_id=m.session_id,
        partition_key=m.partition_key,
        time_to_live_s=m.time_to_live_s,
        application_properties=props,
        body_type=m.body_type,
    )


# Errors that one message can cause (no session id for a session queue, a bad TTL):
# retry such a batch one by one. Anything else means the target takes nothing.
_PER_MESSAGE = (InvalidOperation, BadInput)


async def resubmit(
    backend: Backend,
    source: Address,
    target: EntityPath,
    *,
    selection: Selection | None = None,
    max_count: int | None = None,
    batch_size: int = 100,
    concurrency: int = 32,
    rate: float | None = None,
    dry_run: bool = False,
    new_message_id: bool = False,
    keep_dead_letter_properties: bool = False,
    note: Callable[[str], None] = lambda _: None,
    progress: Callable[[int | None], Callable[[int], None]] | None = None,
) -> ResubmitResult:
    """Move matching DLQ messages to the target: send the copy, then complete the original."""
    started = time.monotonic()
    sel = selection or Selection()
    if batch_size < 1 or concurrency < 1:
        raise BadInput("--batch-size and --concurrency must be at least 1")
    source_info = await backend.get_entity(source.entity)
    target_info = await backend.get_entity(target)
    if target_info.kind == "subscription":
        raise BadInput(f"cannot send to subscription {target}: resubmit to its topic with --to TOPIC")
    if target_info.requires_duplicate_detection and not new_message_id:
        # A copy that keeps its id inside the detection window is accepted and silently dropped
        # by the broker, and its original would then be completed: the message would be gone.
        # Neither the SDK nor the protocol reports the drop, so refuse before anything moves.
        raise BadInput(
            f"{target} has duplicate detection: copies that keep their message id may be dropped by the broker "
            "while their originals are completed",
            hint="rerun with --new-message-id",
        )

    result = ResubmitResult(dry_run=dry_run)
    plan = await plan_run(backend, source, sel, max_count=max_count, scan=dry_run, progress=progress)
    limit = result.selected = plan.selected
    last_sequence = plan.last_sequence
    where = f"topic {target}" if target_info.kind == "topic" else str(target)
    note(f"plan: resubmit {result.selected} message(s) from {source} to {where}" + (" (dry run)" if dry_run else ""))
    if target_info.kind == "topic":
        others = "" if not source.entity.is_subscription else f", not only {source.entity.subscription}"
        note(
            f"note: topic {target} has {target_info.subscription_count} subscription(s): "
            f"every subscription whose rules match gets a copy{others}"
        )
    if dry_run or limit == 0:
        result.elapsed_s = time.monotonic() - started
        return result

    stats = LoopStats()
    limiter = RateLimiter(rate)
    source_path = str(source)  # formatted once: it goes into every copy

    async def send(chunk: list[Message], *, charged: bool = False) -> list[Message]:
        """Send copies of the chunk; returns the messages whose copy was not accepted."""
        copies = [
            make_copy(
                m,
                source=source_path,
                new_message_id=new_message_id,
                keep_dead_letter_properties=keep_dead_letter_properties,
            )
            for m in chunk
        ]
        if not charged:
            await limiter.take(len(chunk))
        try:
            await retrying(lambda: backend.send(target, copies), stats)
        except _PER_MESSAGE as exc:
            if len(chunk) == 1:
                stats.failed += 1
                stats.error(f"send to {target} refused sequence number {chunk[0].sequence_number}: {exc.message}")
                return chunk
            # A batch is all or nothing: one bad message must not hold back the others.
            refused: list[Message] = []
            for m in chunk:
                # Already counted against --rate when the batch was tried.
                refused += await send([m], charged=True)
            return refused
        except SbdlqError as exc:
            # The target takes nothing (disabled, missing, full, unreachable): stop the run.
            stats.failed += len(chunk)
            stats.abort(f"send to {target} failed: {exc.message}")
            return chunk
        return []

    async def send_then_complete(chunk: list[Message]) -> list[Message]:
        refused = await send(chunk)
        refused_ids = {id(m) for m in refused}
        sent = [m for m in chunk if id(m) not in refused_ids]
        if not sent:
            return refused
        try:
            lost = await retrying(lambda: backend.complete(source, sent), stats)
        except SbdlqError as exc:
            lost = sent
            stats.error(f"complete failed after the copy was sent: {exc.message}")
        stats.handled += len(sent)
        if lost:
            stats.lock_lost += len(lost)
            stats.error(f"{len(lost)} original(s) stayed in the {queue_word(source)} after their copy was sent")
        # Nothing was deleted for the refused ones: they are released at the end of the run.
        return refused + lost

    tick = progress(limit) if progress else None
    await locked_loop(
        backend,
        source,
        selection=sel,
        limit=limit,
        last_sequence=last_sequence,
        batch_size=batch_size,
        concurrency=concurrency,
        action=send_then_complete,
        stats=stats,
        lock_duration_s=source_info.lock_duration_s,
        on_done=tick,
    )
    result.resubmitted = stats.handled
    result.failed = stats.failed
    if stats.aborted is not None:
        # Not attempted after the stop: not moved either, so they count as failed.
        result.failed = max(stats.failed, result.selected - stats.handled)
    result.skipped = stats.skipped
    result.retries = stats.retries
    result.errors = stats.errors
    result.lock_lost = stats.lock_lost
    report_unreceived(result.selected, result.resubmitted + result.failed, source, note)
    result.elapsed_s = time.monotonic() - started
    return result
