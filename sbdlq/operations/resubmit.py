"""Resubmit: copy DLQ messages back to their entity (or another), then complete the originals."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from operator import attrgetter

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput
from sbdlq.models import (
    ATTEMPT,
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    RESUBMITTED_FROM,
    EntityInfo,
    Message,
    OutboundMessage,
    attempt_of,
)
from sbdlq.operations.browse import iter_messages, queue_word
from sbdlq.operations.edits import CopyEdits, copy_example
from sbdlq.operations.moving_run import MovingRun, Progress, RunOptions
from sbdlq.operations.planning import Plan
from sbdlq.operations.ratelimit import RateLimiter
from sbdlq.operations.routing_check import Destination, RoutingCheck, check_destination
from sbdlq.operations.sending import CopySender, check_rate
from sbdlq.operations.settle_recovery import complete_or_left
from sbdlq.operations.spread import Spreader, SpreadOptions, check_spread
from sbdlq.operations.target_watch import TargetWatch
from sbdlq.operations.targeted import TARGET_PROPERTY, not_targeted
from sbdlq.operations.unlocked import UnlockedMove
from sbdlq.results import ResubmitResult
from sbdlq.selection import Selection

# What a copy keeps of the original as it is (DESIGN §4); its application properties are
# rebuilt below and its schedule is not copied (the copy is sent now).
COPIED_FIELDS = (
    "body",
    "body_type",
    "message_id",
    "content_type",
    "correlation_id",
    "subject",
    "to",
    "reply_to",
    "reply_to_session_id",
    "session_id",
    "partition_key",
    "time_to_live_s",
    "amqp",  # the emulator listener's kept sections (typed properties ...); None elsewhere
)


def make_copy(
    m: Message,
    *,
    source: Address | str,
    new_message_id: bool = False,
    keep_dead_letter_properties: bool = False,
    edits: CopyEdits | None = None,
) -> OutboundMessage:
    """A fresh message carrying what DESIGN §4 keeps, minus the dead-letter marks, then edited.

    Every copy (resubmit, replay, apply, the UI) is made here, so every one carries where it came
    from and its attempt count: the original's `sbdlq-attempt` + 1 (1 when it had none).
    """
    props = dict(m.application_properties)
    if not keep_dead_letter_properties:
        props.pop(DEAD_LETTER_REASON, None)
        props.pop(DEAD_LETTER_DESCRIPTION, None)
    props[RESUBMITTED_FROM] = f"{source}:{m.sequence_number}"
    props[ATTEMPT] = attempt_of(props) + 1
    # COPIED_FIELDS, positional in OutboundMessage's field order (a test holds the two together):
    # a copy per message is the hot path of a resubmit, and keywords cost more than the rest.
    copy = OutboundMessage(
        m.body,
        uuid.uuid4().hex if new_message_id else m.message_id,
        m.content_type,
        m.correlation_id,
        m.subject,
        m.to,
        m.reply_to,
        m.reply_to_session_id,
        m.session_id,
        m.partition_key,
        m.time_to_live_s,
        None,  # scheduled_enqueue_time: the copy is sent now
        props,
        m.body_type,
        m.amqp,
    )
    return copy if edits is None or edits.is_empty else edits.apply(copy)


class FanOutRefused(BadInput):
    """Copies of a subscription's DLQ would reach other subscriptions of its topic (exit 2).

    Carries what the message says, so the console can offer the two ways forward itself.
    """

    def __init__(
        self, message: str, *, hint: str, topic: EntityPath, reached: dict[str, str], targeted_missing: str | None
    ) -> None:
        super().__init__(message, hint=hint)
        self.topic = topic
        #: each other subscription that would take copies, and how many ("every copy", "2 of 5")
        self.reached = reached
        #: why --only-this-subscription cannot be chosen, from the rules the check read; None: it can
        self.targeted_missing = targeted_missing


@dataclass(frozen=True, slots=True)
class CopyOptions:
    """The copy options of resubmit and replay: what each copy keeps and how it is edited,
    --rate, and whether a topic whose rules cannot be read may be sent to."""

    rate: float | None = None
    new_message_id: bool = False
    keep_dead_letter_properties: bool = False
    allow_unverified_routing: bool = False
    edits: CopyEdits = field(default_factory=CopyEdits)
    #: copies of a subscription's DLQ may reach the topic's other subscriptions too (--fan-out)
    fan_out: bool = False
    #: the subscription every copy is targeted at (its `sbdlq-target`), after the edits
    target_subscription: str | None = None
    #: --spread (and --start-at): copies scheduled evenly over a window; None: sent now
    spread: SpreadOptions | None = None

    def copy_of(self, m: Message, source: Address | str) -> OutboundMessage:
        """The copy of `m`, read from `source`."""
        copy = make_copy(
            m,
            source=source,
            new_message_id=self.new_message_id,
            keep_dead_letter_properties=self.keep_dead_letter_properties,
            edits=self.edits,
        )
        if self.target_subscription is not None:
            copy.application_properties[TARGET_PROPERTY] = self.target_subscription
        return copy

    async def destination(
        self, backend: Backend, target_info: EntityInfo, *, note: Callable[[str], None], command: str = "resubmit"
    ) -> Destination:
        """The target's auto-forwarding chain checked for these copies (see routing_check.check_destination)."""
        return await check_destination(
            backend,
            target_info,
            new_message_id=self.new_message_id,
            allow_unverified=self.allow_unverified_routing,
            note=note,
            command=command,
        )


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
    allow_unverified_routing: bool = False,
    edits: CopyEdits | None = None,
    fan_out: bool = False,
    only_this_subscription: bool = False,
    spread: SpreadOptions | None = None,
    note: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
    example: bool = False,
) -> ResubmitResult:
    """Move matching DLQ messages to the target: send the copy, then complete the original.

    A dry run with edits shows one message and its copy (`result.example`); `example` shows it
    without edits too (the console: the copy as it will be sent, from the first plan)."""
    # In RunOptions' field order.
    options = RunOptions(selection or Selection(), max_count, batch_size, concurrency, dry_run, note, progress)
    copying = CopyOptions(  # in its field order
        rate, new_message_id, keep_dead_letter_properties, allow_unverified_routing, edits or CopyEdits(), fan_out
    )
    copying = replace(copying, spread=spread)
    run = Resubmit(backend, source, target, options, copying)
    run.only_this_subscription = only_this_subscription
    run.always_example = example
    return await run.run()


class Resubmit(MovingRun[ResubmitResult]):
    """Send a copy of each message to the target, then complete the original."""

    # An original left in the DLQ after its copy went out is not "resubmitted": the summary
    # counts what was both sent and completed, and reports the rest as left_beside_copy.
    target_info: EntityInfo  # read by check()
    #: a dry run shows its example even without edits
    always_example = False

    def __init__(
        self,
        backend: Backend,
        source: Address,
        target: EntityPath,
        options: RunOptions,
        copying: CopyOptions,
    ) -> None:
        super().__init__(backend, source, ResubmitResult(dry_run=options.dry_run), options)
        self.target = self.send_target = target
        self.copying = copying
        self.source_path = str(source)  # formatted once: it goes into every copy
        #: Copies sent and originals completed in one transaction (the local emulator): no message
        #: is ever between the two, so nothing bounds a chunk but the batch (and --rate's pace).
        #: --spread: copies scheduled and recorded, then originals completed (never in one
        #: transaction: the schedule's sequence numbers are recorded between the two).
        self.spreader: Spreader[Message] | None = None
        if copying.spread is not None:
            self.spreader = Spreader(
                backend, target, copying.spread, attrgetter("sequence_number"), on_unrecorded=self.unrecorded
            )
        self.atomic = backend.moves_atomically and self.spreader is None
        if self.atomic:
            chunk, rate = max(1, options.batch_size), copying.rate
            if rate is not None and math.isfinite(rate) and rate > 0:  # (check() refuses any other)
                chunk = max(1, min(chunk, int(rate)))
            self.concurrency = self.chunk_size = chunk
        self.sender = CopySender[Message](
            backend,
            target,
            self.stats,
            RateLimiter(copying.rate),
            copy_of=self.copy_of,
            name_of=lambda m: f"sequence number {m.sequence_number}",
            deliver=self.send_and_complete if self.atomic else None if self.spreader is None else self.spreader.deliver,
            unconfirmed=self.unconfirmed,
        )
        #: The target topic's rules (None: a queue, or rules unread and that allowed).
        self.routing: RoutingCheck | None = None
        #: The subscription the copies must reach: the one a subscription's DLQ belongs to.
        self.must_reach: str | None = None
        self.unroutable = 0
        #: --only-this-subscription: copies carry `sbdlq-target` and must reach that subscription alone
        self.only_this_subscription = False
        #: --only-this-subscription: the lease held and the topic checked before batches are sent
        self.targeted: TargetWatch | None = None
        #: ids of messages whose copy was scheduled but not recorded (--spread): kept, not completed
        self.not_to_complete: set[int] = set()

    async def check(self) -> EntityInfo:
        if self.options.batch_size < 1 or self.options.concurrency < 1:
            raise BadInput("--batch-size and --concurrency must be at least 1")
        check_rate(self.copying.rate)
        check_spread(self.copying.spread, self.copying.rate)
        # Independent round trips: asked together.
        source_info, target_info = await asyncio.gather(
            self.backend.get_entity(self.source.entity), self.backend.get_entity(self.target)
        )
        self.target_info = target_info
        if self.only_this_subscription:
            await self.check_targeted(target_info)
        # Where a copy comes to rest is the end of the target's auto-forwarding chain: every
        # entity on it may drop the copy (duplicate detection, a topic no rule takes it in).
        destination = await self.copying.destination(self.backend, target_info, note=self.note)
        self.routing = destination.routing
        if destination.topic is not None:
            await self.check_return(destination.topic)
        if self.options.dry_run and (self.always_example or not self.copying.edits.is_empty):
            await self.show_example()
        return source_info

    async def check_targeted(self, target_info: EntityInfo) -> None:
        """--only-this-subscription: a subscription's DLQ sent back to its own topic, and targeted
        routing enabled there; the copies then name the subscription (the routing check proves it)."""
        source, target = self.source.entity, self.target
        if self.copying.fan_out:
            raise BadInput("--only-this-subscription and --fan-out contradict each other: choose one")
        if not source.is_subscription or source.name.lower() != target.name.lower() or target_info.kind != "topic":
            raise BadInput(
                "--only-this-subscription resubmits a subscription's DLQ to its own topic",
                hint="name a TOPIC/Subscriptions/SUB and no --to",
            )
        if self.copying.allow_unverified_routing:
            raise BadInput("--only-this-subscription needs the routing check: drop --allow-unverified-routing")
        watch = self.targeted = TargetWatch(
            self.backend, target, source.subscription or "", hold_lease=not self.options.dry_run
        )
        subscriptions = await watch.start()
        wanted = (source.subscription or "").lower()
        name = next((s.subscription for s in subscriptions if s.subscription.lower() == wanted), source.subscription)
        self.copying = replace(self.copying, target_subscription=name)

    async def run(self) -> ResubmitResult:
        """The run (MovingRun.run), its lease given back and its spread record closed however it ends."""
        try:
            return await super().run()
        finally:
            if self.spreader is not None:
                self.spreader.close()  # finished by account(); here only when the run raised
            if self.targeted is not None:
                await self.targeted.close()  # a refusal after the lease was taken, a signal: given back

    async def show_example(self) -> None:
        """A dry run with edits shows the first selected message and its edited copy."""
        async for m in iter_messages(self.backend, self.source, selection=self.selection, limit=1):
            self.result.example = copy_example(m, self.copy_of(m))

    async def check_return(self, topic: EntityPath) -> None:
        """Refuse when copies of a subscription's DLQ would not reach that subscription again, or
        (without --fan-out) would reach the topic's other subscriptions too."""
        routing = self.routing
        source = self.source.entity
        if routing is None or not source.is_subscription or source.name.lower() != topic.name.lower():
            return
        sub = self.must_reach = source.subscription
        if sub is None:
            return
        others = [] if self.copying.fan_out else routing.others(sub)
        everywhere = [name for name, takes_all in others if takes_all]
        if everywhere:
            raise self.fan_out_refusal(routing, topic, {name: "every copy" for name in everywhere})
        if routing.takes_everything(sub) and not others:
            return
        # Before anything moves: every selected copy must come back to the subscription it left,
        # and to no other.
        reached: Counter[str] = Counter()
        scanned = 0
        async for m in iter_messages(self.backend, self.source, selection=self.selection, limit=self.options.max_count):
            copy = self.copy_of(m)
            scanned += 1
            if not routing.reaches(sub, copy):
                raise BadInput(
                    f"the copy of sequence number {m.sequence_number} would not reach subscription {sub}: "
                    f"topic {topic} would not deliver it back to {source}",
                    hint=routing.miss_hint(sub),
                )
            if others:
                reached.update(routing.other_takers(sub, copy))
        if reached:
            counts = {name: f"{n} of {scanned}" for name, n in sorted(reached.items())}
            raise self.fan_out_refusal(routing, topic, counts)

    def fan_out_refusal(self, routing: RoutingCheck, topic: EntityPath, reached: dict[str, str]) -> FanOutRefused:
        """The refusal of copies that would reach other subscriptions: which, and how many copies each."""
        listed = ", ".join(f"{name} ({how})" for name, how in reached.items())
        refusal = not_targeted(topic, routing.rules)  # the rules the check read: no second read
        return FanOutRefused(
            f"resubmitting {self.source} to topic {topic} would also give copies to its subscription(s) {listed}",
            hint=f"add --only-this-subscription (after `sbdlq routing enable-targeted {topic}`) to reach it alone, "
            "--fan-out to accept that, or resubmit --to a queue that only this subscription's consumer reads",
            topic=topic,
            reached=reached,
            targeted_missing=None if refusal is None else refusal.line(),
        )

    def plan_line(self) -> str:
        where = f"topic {self.target}" if self.target_info.kind == "topic" else str(self.target)
        spread = self.copying.spread
        over = "" if spread is None else f", scheduled evenly over {spread.window}"
        return f"plan: resubmit {self.result.selected} message(s) from {self.source} to {where}{over}"

    def before_moving(self) -> None:
        if self.spreader is not None:
            self.spreader.begin(self.result.selected, self.source, self.target_info.kind)

    def explain(self) -> None:
        if self.target_info.kind == "topic" and self.target_info.subscription_count == 0:
            self.note(f"warning: topic {self.target} has no subscription: the broker would drop every copy")
        elif self.target_info.kind == "topic" and self.copying.target_subscription is not None:
            sub = self.copying.target_subscription
            self.note(
                f"note: the copies carry {TARGET_PROPERTY}={sub}: of topic {self.target}'s subscriptions "
                f"only {sub} takes them"
            )
        elif self.target_info.kind == "topic":
            source = self.source.entity
            others = "" if not source.is_subscription else f", not only {source.subscription}"
            self.note(
                f"note: topic {self.target} has {self.target_info.subscription_count} subscription(s): "
                f"every subscription whose rules match gets a copy{others}"
            )

    def kept_back(self) -> int:
        return self.unroutable

    def account(self, *, stopped: bool = False) -> None:
        self.result.unroutable = self.unroutable  # before the rest is shared out
        if self.targeted is not None:
            self.result.set_strays(self.targeted.strays(), str(self.targeted.path))
        super().account(stopped=stopped)
        spreader = self.spreader
        if spreader is not None and spreader.start is not None:
            r = self.result
            self.result.spread = spreader.summary()
            spreader.finish({"resubmitted": r.done, "left_beside_copy": r.left_beside_copy, "failed": r.failed})

    def copy_of(self, m: Message) -> OutboundMessage:
        """The copy resubmit sends for a message."""
        return self.copying.copy_of(m, self.source_path)

    async def move(self, plan: Plan, info: EntityInfo, tick: Callable[[int], None] | None) -> None:
        """Without locks where the backend moves in one transaction and nothing needs a chunk
        of its own (no --rate, every copy routable); else, or from a batch that failed on, locked."""
        try:
            await self._move(plan, info, tick)
        finally:
            if self.targeted is not None:
                await self.targeted.finish()  # the last chunk confirmed (or not), the lease given back

    async def _move(self, plan: Plan, info: EntityInfo, tick: Callable[[int], None] | None) -> None:
        """The unlocked path where it applies, then the locked loop for the rest."""
        if self.atomic and self.copying.rate is None and self.routes_all():
            unlocked = UnlockedMove(
                self.backend,
                self.source,
                self.target,
                selection=self.selection,
                copy_of=self.copy_of,
                stats=self.stats,
                batch_size=self.options.batch_size,
                large_bodies=self.options.concurrency,
                on_done=self.moved_unlocked(tick),
                before_batch=self.still_targeted,
            )
            if await unlocked.run(plan.selected, plan.last_sequence):
                return
            plan = replace(plan, selected=plan.selected - unlocked.taken)
        await super().move(plan, info, tick)

    def routes_all(self) -> bool:
        """Whether the target takes every copy (a queue, or a topic whose rules take everything)."""
        routing, sub = self.routing, self.must_reach
        return routing is None or (routing.takes_everything(sub) if sub else routing.takes_all)

    def route(self, chunk: list[Message]) -> tuple[list[Message], list[Message]]:
        """The messages whose copy the target topic delivers (to the source subscription when
        there is one), and those whose copy it would drop: not sent, their originals stay."""
        if self.routes_all():
            return chunk, []
        routing, sub = self.routing, self.must_reach
        assert routing is not None
        going: list[Message] = []
        staying: list[Message] = []
        for m in chunk:
            copy = self.copy_of(m)
            ok = routing.reaches(sub, copy) if sub else routing.routable(copy)
            (going if ok else staying).append(m)
        if staying:
            self.unroutable += len(staying)
            topic = routing.topic
            where = f"subscription {sub} of topic {topic}" if sub else f"any subscription of topic {topic}"
            self.stats.error(f"copies that would not reach {where} were not sent; their originals stay in the DLQ")
        return going, staying

    async def still_targeted(self) -> bool:
        """Whether copies may still be sent: with --only-this-subscription, only while targeted
        routing is enabled on the topic (else the run stops: the rest stay in the DLQ)."""
        if self.targeted is None:
            return True
        if self.stats.aborted is not None:
            return False  # stopped already (chunks in flight share the one reason)
        stop = await self.targeted.lost()
        if stop is None:
            return True
        self.stats.abort(f"{stop} (the rest stay in the DLQ)")
        return False

    def moved_unlocked(self, tick: Callable[[int], None] | None) -> Callable[[int], None] | None:
        """The unlocked path's count of copies moved (each batch one transaction, checked before)."""
        watch = self.targeted
        if watch is None:
            return tick

        def moved(n: int) -> None:
            watch.sending(n)
            watch.sent(n)
            if tick is not None:
                tick(n)

        return moved

    async def settle(self, chunk: list[Message]) -> list[Message]:
        """Send the copies, then complete the originals whose copy was accepted."""
        if not await self.still_targeted():
            return chunk  # not sent: released at the end of the run
        chunk, unroutable = self.route(chunk)
        if not chunk:
            return unroutable
        if self.atomic:
            # Sent and completed together: what was not refused is resubmitted.
            refused = await self.send(chunk)
            self.stats.handled += len(chunk) - len(refused)
            return unroutable + refused
        refused = unroutable + await self.send(chunk)
        if self.not_to_complete:
            # Scheduled but unrecorded (--spread): left beside their copy, never completed.
            refused += [m for m in chunk if id(m) in self.not_to_complete]
        refused_ids = {id(m) for m in refused}
        sent = [m for m in chunk if id(m) not in refused_ids]
        if not sent:
            return refused
        stats = self.stats
        lost, error = await complete_or_left(self.backend, self.source, sent, stats)
        if error is not None:
            # Stop: each further chunk would leave up to a chunk of duplicates (a full store
            # doesn't get better), and the bound is --concurrency per run, not per chunk.
            stats.abort(f"complete failed after the copy was sent: {error.message}")
        # Only what was both sent and completed is resubmitted; the rest is reported as left over.
        stats.handled += len(sent) - len(lost)
        if lost:
            stats.left_beside(lost)
            line = f"{len(lost)} original(s) stayed in the {queue_word(self.source)} after their copy was sent"
            stats.stayed(line)
            # Stop too (the same per-run bound); the line is taken back if a check finds them gone.
            stats.abort(line)
        # Nothing was deleted for the refused ones: they are released at the end of the run.
        return refused + lost

    def unconfirmed(self, chunk: list[Message]) -> None:
        """Originals whose copy may have reached the target (the send's answer was lost): left in
        the DLQ beside it, counted so, and never copied again in this run (LockedLoop skips them)."""
        self.stats.left_beside(chunk, unconfirmed=True)
        self.stats.error(
            f"{len(chunk)} copy(ies) may have reached {self.target} (their send got no answer): their originals "
            f"stay in the {queue_word(self.source)} and were not sent again"
        )
        # Stop, as after a failed complete: the bound on originals beside their copy is
        # --concurrency per run, and a second lost answer would leave a second chunk.
        self.stats.abort(f"a send to {self.target} got no answer: stopped before sending more copies")

    def unrecorded(self, chunk: list[Message], why: str) -> None:
        """A chunk scheduled whose record failed: its originals stay, beside their copy; the run stops."""
        self.stats.left_beside(chunk)
        self.stats.abort(f"{why}; their originals stay in the {queue_word(self.source)}")
        self.not_to_complete.update(id(m) for m in chunk)

    async def send_and_complete(self, chunk: list[Message], copies: list[OutboundMessage]) -> list[Message]:
        """The copies sent and the originals completed in one transaction; the originals whose lock was lost."""
        return await self.backend.send_and_complete(self.target, copies, self.source, chunk)

    async def send(self, chunk: list[Message]) -> list[Message]:
        """Send copies of the chunk; returns the messages whose copy was not accepted."""
        watch = self.targeted
        if watch is None:
            return await self.sender.send(chunk)
        watch.sending(len(chunk))
        try:
            return await self.sender.send(chunk)
        finally:
            watch.sent(len(chunk))
