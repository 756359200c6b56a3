"""Resubmit: copy DLQ messages back to their entity (or another), then complete the originals."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable

from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, InvalidOperation, SbdlqError
from sbdlq.models import (
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    RESUBMITTED_FROM,
    EntityInfo,
    Message,
    OutboundMessage,
    ResubmitResult,
)
from sbdlq.operations.browse import queue_word
from sbdlq.operations.move import RateLimiter, retrying
from sbdlq.operations.run import MovingRun, Progress, RunOptions
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
    progress: Progress | None = None,
) -> ResubmitResult:
    """Move matching DLQ messages to the target: send the copy, then complete the original."""
    # In RunOptions' field order.
    options = RunOptions(selection or Selection(), max_count, batch_size, concurrency, dry_run, note, progress)
    run = Resubmit(
        backend,
        source,
        target,
        options,
        rate=rate,
        new_message_id=new_message_id,
        keep_dead_letter_properties=keep_dead_letter_properties,
    )
    return await run.run()


class Resubmit(MovingRun[ResubmitResult]):
    """Send a copy of each message to the target, then complete the original."""

    # An original left in the DLQ after its copy went out is not "resubmitted": the summary
    # counts what was both sent and completed, and reports the rest as lock_lost.
    LOST_ARE_DONE = False
    target_info: EntityInfo  # read by check()

    def __init__(
        self,
        backend: Backend,
        source: Address,
        target: EntityPath,
        options: RunOptions,
        *,
        rate: float | None,
        new_message_id: bool,
        keep_dead_letter_properties: bool,
    ) -> None:
        super().__init__(backend, source, ResubmitResult(dry_run=options.dry_run), options)
        self.target = self.send_target = target
        self.rate = rate
        self.limiter = RateLimiter(rate)
        self.new_message_id = new_message_id
        self.keep_dead_letter_properties = keep_dead_letter_properties
        self.source_path = str(source)  # formatted once: it goes into every copy

    async def check(self) -> EntityInfo:
        if self.options.batch_size < 1 or self.options.concurrency < 1:
            raise BadInput("--batch-size and --concurrency must be at least 1")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise BadInput(f"invalid --rate {self.rate}: give a positive number of messages per second")
        source_info = await self.backend.get_entity(self.source.entity)
        target_info = self.target_info = await self.backend.get_entity(self.target)
        if target_info.kind == "subscription":
            raise BadInput(f"cannot send to subscription {self.target}: resubmit to its topic with --to TOPIC")
        if target_info.requires_duplicate_detection and not self.new_message_id:
            # A copy that keeps its id inside the detection window is accepted and silently dropped
            # by the broker, and its original would then be completed: the message would be gone.
            # Neither the SDK nor the protocol reports the drop, so refuse before anything moves.
            raise BadInput(
                f"{self.target} has duplicate detection: copies that keep their message id may be dropped by the "
                "broker while their originals are completed",
                hint="rerun with --new-message-id",
            )
        return source_info

    def plan_line(self) -> str:
        where = f"topic {self.target}" if self.target_info.kind == "topic" else str(self.target)
        return f"plan: resubmit {self.result.selected} message(s) from {self.source} to {where}"

    def explain(self) -> None:
        if self.target_info.kind == "topic":
            source = self.source.entity
            others = "" if not source.is_subscription else f", not only {source.subscription}"
            self.note(
                f"note: topic {self.target} has {self.target_info.subscription_count} subscription(s): "
                f"every subscription whose rules match gets a copy{others}"
            )

    async def settle(self, chunk: list[Message]) -> list[Message]:
        """Send the copies, then complete the originals whose copy was accepted."""
        refused = await self.send(chunk)
        refused_ids = {id(m) for m in refused}
        sent = [m for m in chunk if id(m) not in refused_ids]
        if not sent:
            return refused
        stats = self.stats
        try:
            lost = await retrying(lambda: self.backend.complete(self.source, sent), stats)
        except SbdlqError as exc:
            lost = sent
            # Stop: each further chunk would leave up to a chunk of duplicates (a full store
            # doesn't get better), and the bound is --concurrency per run, not per chunk.
            stats.abort(f"complete failed after the copy was sent: {exc.message}")
        # Only what was both sent and completed is resubmitted; the rest is reported as left over.
        stats.handled += len(sent) - len(lost)
        if lost:
            stats.lock_lost += len(lost)
            stats.error(f"{len(lost)} original(s) stayed in the {queue_word(self.source)} after their copy was sent")
        # Nothing was deleted for the refused ones: they are released at the end of the run.
        return refused + lost

    async def send(self, chunk: list[Message], *, charged: bool = False) -> list[Message]:
        """Send copies of the chunk; returns the messages whose copy was not accepted."""
        copies = [
            make_copy(
                m,
                source=self.source_path,
                new_message_id=self.new_message_id,
                keep_dead_letter_properties=self.keep_dead_letter_properties,
            )
            for m in chunk
        ]
        if not charged:
            await self.limiter.take(len(chunk))
        stats, target = self.stats, self.target
        try:
            await retrying(lambda: self.backend.send(target, copies), stats)
        except _PER_MESSAGE as exc:
            if len(chunk) == 1:
                stats.failed += 1
                stats.error(f"send to {target} refused sequence number {chunk[0].sequence_number}: {exc.message}")
                return chunk
            # A batch is all or nothing: one bad message must not hold back the others.
            refused: list[Message] = []
            for m in chunk:
                # Already counted against --rate when the batch was tried.
                refused += await self.send([m], charged=True)
            return refused
        except SbdlqError as exc:
            # The target takes nothing (disabled, missing, full, unreachable): stop the run.
            stats.failed += len(chunk)
            stats.abort(f"send to {target} failed: {exc.message}")
            return chunk
        return []
