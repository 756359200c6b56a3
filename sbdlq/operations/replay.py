"""Replay: send the records of an export or peek file to an entity, with resubmit's copy rules.

Two passes over the input and never the whole of it in memory: the first checks every line
(a bad one refuses the run before anything is sent) and counts the selection; the second
sends copies, at most --concurrency records between reading and the broker's answer. With a
state file (operations/replay_state.py) each accepted chunk's line numbers are synced before
the next are counted as done, so a killed replay resumed with --resume sends again at most
--concurrency lines. Records a `purge --export` never marked deleted are held back
(records.DeleteMarks): a second copy of a message still in the DLQ is never sent unasked.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from operator import attrgetter
from pathlib import Path

from sbdlq.addresses import EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, SbdlqError
from sbdlq.models import OutboundMessage
from sbdlq.operations.edits import copy_example
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.moving_run import Progress
from sbdlq.operations.ratelimit import RateLimiter
from sbdlq.operations.records import DeleteMarks, Record, RecordFile
from sbdlq.operations.replay_state import ReplayState, finished_replay
from sbdlq.operations.resubmit import CopyOptions
from sbdlq.operations.routing_check import RoutingCheck
from sbdlq.operations.sending import CopySender, check_rate
from sbdlq.operations.spread import Spreader, check_spread
from sbdlq.operations.stopping import RunInterrupted, Stopper, run_stoppable
from sbdlq.operations.target_watch import TargetWatch
from sbdlq.results import ReplayResult, sequence_ranges
from sbdlq.selection import Selection


@dataclass(frozen=True, slots=True)
class ReplayOptions(CopyOptions):
    """What a replay does with the records it reads (and with their copies: CopyOptions)."""

    selection: Selection = field(default_factory=Selection)
    max_count: int | None = None
    concurrency: int = 32
    dry_run: bool = False
    #: The sidecar recording accepted lines (None: stdin without --state, not resumable).
    state: Path | None = None
    resume: bool = False
    #: Send the records a purge never marked deleted too (they may still be in the DLQ).
    include_held_back: bool = False


async def replay(
    backend: Backend,
    source: Path | None,
    target: EntityPath,
    options: ReplayOptions,
    *,
    note: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
) -> ReplayResult:
    """Send copies of the selected records of `source` (None: stdin) to `target`."""
    return await Replay(backend, RecordFile(source), target, options, note, progress).run()


@dataclass(eq=False)
class Replay:
    """One replay run: check the input and the target, then send chunk by chunk."""

    backend: Backend
    records: RecordFile
    target: EntityPath
    options: ReplayOptions
    note: Callable[[str], None]
    progress: Progress | None
    result: ReplayResult = field(init=False)
    stats: LoopStats = field(init=False, default_factory=LoopStats)
    routing: RoutingCheck | None = field(init=False, default=None)
    #: --only-subscription: the lease held and the topic checked before chunks are sent
    targeted: TargetWatch | None = field(init=False, default=None)
    done: set[int] = field(init=False, default_factory=set)
    #: what the delete marks hold back (read by the first pass)
    marks: DeleteMarks = field(init=False, default_factory=DeleteMarks)
    #: lines not sent because of their marks (repeated; unconfirmed unless --include-held-back)
    held: set[int] = field(init=False, default_factory=set)
    state: ReplayState | None = field(init=False, default=None)
    source_label: str = field(init=False)
    sender: CopySender[Record] = field(init=False)
    #: --spread: copies scheduled over a window and recorded (None: sent now)
    spreader: Spreader[Record] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.result = ReplayResult(dry_run=self.options.dry_run)
        self.source_label = "stdin" if self.records.path is None else self.records.path.name
        self.sender = CopySender[Record](
            self.backend,
            self.target,
            self.stats,
            RateLimiter(self.options.rate),
            copy_of=self.copy_of,
            name_of=lambda r: f"line {r.line}",
            unconfirmed=self.unconfirmed,
        )
        if self.options.spread is not None:
            self.spreader = Spreader(
                self.backend, self.target, self.options.spread, attrgetter("line"), on_unrecorded=self.unrecorded
            )
            self.sender.deliver = self.spreader.deliver

    def unconfirmed(self, records: list[Record]) -> None:
        """Records whose send got no answer: their copy may be in the target. Counted, never sent again."""
        self.result.unconfirmed += len(records)
        lines = ", ".join(sequence_ranges([r.line for r in records]))
        self.stats.error(
            f"{len(records)} record(s) may have reached {self.target} (their send got no answer; lines {lines}): "
            "not sent again"
        )
        # Stop: at most --concurrency records per run may be in the target unconfirmed.
        self.stats.abort(f"a send to {self.target} got no answer: stopped before sending more records")

    def copy_of(self, record: Record) -> OutboundMessage:
        """The copy a record is sent as: resubmit's copy rules, then the edits."""
        return self.options.copy_of(record.message, self.source_label)

    async def run(self) -> ReplayResult:
        """Check, plan, and unless it is a dry run, send; RunInterrupted on SIGINT/SIGTERM."""
        started = time.monotonic()
        stopper = Stopper(self.stats.abort)
        try:
            await run_stoppable(self._run, stopper, self._partial)
        finally:
            self.result.elapsed_s = time.monotonic() - started
            self.records.close()
            if self.targeted is not None:
                await self.targeted.close()
            if self.spreader is not None:
                self.spreader.close()  # finished by account(); here only when the run raised
            if self.state is not None:
                if self._finished():
                    self.state.finish()
                self.state.close()
        if stopper.signum is not None:
            raise RunInterrupted(self.result, stopper.signum)
        return self.result

    def _partial(self) -> ReplayResult:
        """The result so far, for a replay a signal stopped."""
        self.account()
        return self.result

    async def _run(self, stopper: Stopper) -> None:
        o = self.options
        check_rate(o.rate)
        check_spread(o.spread, o.rate)
        self.check_state()
        info = await self.backend.get_entity(self.target)
        # The same checks as resubmit, along the target's auto-forwarding chain.
        destination = await o.destination(self.backend, info, note=self.note, command="replay")
        self.routing = destination.routing
        first = await self.scan(info.kind)
        if self._state_finished():
            self.note(f"note: {o.state} records a replay of this input that finished: nothing to send (--resume)")
        elif self.done:
            self.note(f"note: {len(self.done)} line(s) already replayed by an earlier run are skipped (--resume)")
        where = f"topic {self.target}" if info.kind == "topic" else str(self.target)
        self.note(
            f"plan: replay {self.result.selected} record(s) from {self.records.name} to {where}"
            + ("" if o.spread is None else f", scheduled evenly over {o.spread.window}")
            + (" (dry run)" if o.dry_run else "")
        )
        if o.dry_run:
            if first is not None and not o.edits.is_empty:
                self.result.example = copy_example(first.message, self.copy_of(first))
            return
        if self.result.selected == 0:
            return
        if self.spreader is not None:
            self.spreader.begin(self.result.selected, self.records.name, info.kind)
        tick = self.progress(self.result.selected) if self.progress else None
        stopper.moving = True
        try:
            await self.send_all(tick)
        except SbdlqError as exc:
            self.stats.abort(exc.message)
        finally:
            if self.targeted is not None:
                await self.targeted.finish()  # the last chunk confirmed (or not), the lease given back
        self.account()

    async def check_takers(self, kind: str) -> None:
        """Before anything is sent: refuse copies the topic would give to more than one subscription
        (unless --fan-out), and with --only-subscription, to any but that one."""
        o = self.options
        sub = o.target_subscription
        if sub is not None:
            self.options = o = replace(o, target_subscription=await self.targeted_name(sub, kind))
        routing = self.routing
        if routing is None or kind != "topic" or (o.fan_out and sub is None):
            return
        reached: Counter[str] = Counter()
        scanned = 0
        for record in self.selected_records():
            takers = routing.takers(self.copy_of(record))
            scanned += 1
            if o.target_subscription is not None and takers != [o.target_subscription]:
                reach = ", ".join(takers) or "no subscription"
                raise BadInput(
                    f"the copy of line {record.line} would reach {reach}, not only {o.target_subscription}",
                    hint="check the topic's rules: `sbdlq routing status TOPIC`",
                )
            if len(takers) > 1:
                reached.update(takers)
        if reached:
            listed = ", ".join(f"{name} ({n} of {scanned})" for name, n in sorted(reached.items()))
            raise BadInput(
                f"replaying {self.records.name} to topic {self.target} would give copies to more than one "
                f"subscription: {listed}",
                hint="add --only-subscription SUB (after `sbdlq routing enable-targeted TOPIC`) to reach one, "
                "or --fan-out to accept that",
            )

    async def targeted_name(self, sub: str, kind: str) -> str:
        """--only-subscription: the subscription's name as the topic spells it, once targeted routing is on."""
        o = self.options
        if o.fan_out:
            raise BadInput("--only-subscription and --fan-out contradict each other: choose one")
        if o.allow_unverified_routing:
            raise BadInput("--only-subscription needs the routing check: drop --allow-unverified-routing")
        if kind != "topic":
            raise BadInput(f"--only-subscription needs a topic: {self.target} is a {kind}")
        self.targeted = TargetWatch(self.backend, self.target, sub, hold_lease=not o.dry_run)
        subscriptions = await self.targeted.start()
        for s in subscriptions:
            if s.subscription.lower() == sub.lower():
                return s.subscription
        raise BadInput(f"--only-subscription {sub}: topic {self.target} has no such subscription")

    def check_state(self) -> None:
        """Refuse a leftover state without --resume, and --resume without a state to keep."""
        o = self.options
        if o.state is None:
            if o.resume:
                raise BadInput("--resume needs --state FILE when the records come from stdin")
            return
        if o.state.exists() and not o.resume:
            if finished_replay(o.state):
                raise BadInput(
                    f"{o.state} records a replay of this input that finished",
                    hint="delete the file to replay everything again",
                )
            raise BadInput(
                f"{o.state} exists: an earlier replay of this input did not finish",
                hint="add --resume to send only the lines it did not, or delete the file to replay everything",
            )

    def open_state(self) -> None:
        """Open and lock the state once the input is known good (a dry run only reads an existing one)."""
        path = self.options.state
        if path is None or (self.options.dry_run and not path.exists()):
            return
        state = ReplayState(path)
        try:
            self.done = state.load(self.records.digest)
        except BaseException:
            state.close()  # not ours, or not a state: left exactly as it was
            raise
        self.state = state

    async def scan(self, kind: str) -> Record | None:
        """Check every line (a bad one refuses the run), count the selection, check where the
        copies go (before a state file is made: a refused run leaves none); returns the first selected."""
        first: Record | None = None
        for record in self.records.first_pass():
            if record is None:
                continue
            self.marks.see(record)
            chosen = self.choose(record)
            if chosen and first is None:
                first = record
        if self.records.torn is not None:
            self.note(
                f"note: {self.records.name} line {self.records.torn} is a record cut short (a purge --export "
                "killed while writing it, before its delete: that message is still in the DLQ); not sent"
            )
        if self.marks.any:
            # Known only at the end (a later record repeats an earlier one): count again with them.
            unconfirmed = set() if self.options.include_held_back else self.marks.unconfirmed
            self.held = self.marks.repeated | unconfirmed
            first = self._recount()
        await self.check_takers(kind)
        self.open_state()
        if self.done or self._state_finished():
            first = self._recount()
        return first

    def _recount(self) -> Record | None:
        """Count the selection again, now that the lines held back or done before are known (second
        pass, no I/O risk)."""
        self.result = ReplayResult(dry_run=self.options.dry_run)
        first: Record | None = None
        for record in self.records.second_pass():
            if record is not None and self.choose(record) and first is None:
                first = record
        return first

    def choose(self, record: Record) -> bool:
        """Whether this run sends the record; counts it as selected, not matching or held back."""
        if record.line in self.done or self._state_finished():
            return False
        o, r = self.options, self.result
        if o.max_count is not None and r.selected >= o.max_count:
            return False
        if not o.selection.matches(record.message):
            r.not_matching += 1
            return False
        if record.line in self.held:
            if record.line in self.marks.repeated:
                r.repeated += 1
            else:
                r.held_back += 1
                r.held_back_sequences.append(record.message.sequence_number)
            return False
        r.selected += 1
        return True

    def selected_records(self) -> Iterator[Record]:
        """The records to send, read again from the input, in order."""
        taken = 0
        limit = self.result.selected
        for record in self.records.second_pass():
            if taken >= limit:
                return
            if record is None or record.line in self.done or record.line in self.held:
                continue
            if not self.options.selection.matches(record.message):
                continue
            taken += 1
            yield record

    async def send_all(self, tick: Callable[[int], None] | None) -> None:
        """Chunks of at most --concurrency records; a chunk is read only when a slot is free."""
        chunk = max(1, self.options.concurrency)
        slots = asyncio.Semaphore(1)
        pending: set[asyncio.Task[None]] = set()
        records = self.selected_records()
        try:
            while self.stats.aborted is None:
                await slots.acquire()
                items = list(itertools.islice(records, chunk))
                if not items or self.stats.aborted is not None:
                    slots.release()
                    break
                task = asyncio.create_task(self.send_chunk(items, slots, tick))
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            # Chunks in flight finish even on Ctrl-C: their lines must reach the state file.
            if pending:
                await asyncio.wait(set(pending))

    async def send_chunk(
        self, items: list[Record], slots: asyncio.Semaphore, tick: Callable[[int], None] | None
    ) -> None:
        """Send one chunk; record the lines the broker accepted."""
        going = items
        try:
            watch = self.targeted
            if watch is not None and (stop := await watch.lost()) is not None:
                self.stats.abort(f"{stop} (--resume sends the rest)")
                return
            going = self.route(items)
            refused = await self.send(going) if going else []
            refused_lines = {r.line for r in refused}
            accepted = [r.line for r in going if r.line not in refused_lines]
            # Counted as sent before the state is written: a full disk there does not make them failed.
            self.stats.handled += len(accepted)
            self.record_state(accepted)
        except SbdlqError as exc:
            # Raised before anything of the chunk was counted (the sender counts what it refuses).
            self.stats.failed += len(going)
            self.stats.abort(exc.message)
        except Exception as exc:  # never a task's exception left unretrieved, nor a chunk uncounted
            self.stats.failed += len(going)
            self.stats.abort(f"unexpected error sending records: {type(exc).__name__}: {exc}")
        finally:
            slots.release()
            if tick:
                tick(len(items))

    async def send(self, going: list[Record]) -> list[Record]:
        """Send the copies (counted by the targeted run's watch, which confirms them later)."""
        watch = self.targeted
        if watch is None:
            return await self.sender.send(going)
        watch.sending(len(going))
        try:
            return await self.sender.send(going)
        finally:
            watch.sent(len(going))

    def unrecorded(self, items: list[Record], why: str) -> None:
        """A chunk scheduled whose spread record failed: replayed all the same; the run stops."""
        self.stats.abort(f"{why} (`spread cancel` will not find them)")

    def record_state(self, accepted: list[int]) -> None:
        """Record accepted lines; a state that cannot be written stops the run and says what it means."""
        if self.state is None:
            return
        try:
            self.state.record(accepted)
        except SbdlqError as exc:
            self.stats.abort(
                f"{exc.message}: {len(accepted)} record(s) were sent but not recorded, so a --resume would "
                "send them again"
            )

    def route(self, items: list[Record]) -> list[Record]:
        """The records whose copy a subscription of the target topic takes; the rest are kept back."""
        routing = self.routing
        if routing is None or routing.takes_all:
            return items
        going = [r for r in items if routing.routable(self.copy_of(r))]
        missed = len(items) - len(going)
        if missed:
            self.result.unroutable += missed
            self.stats.error(f"records no subscription of topic {self.target} would take were not sent")
        return going

    def account(self) -> None:
        """Copy what the sends did into the result."""
        r, stats = self.result, self.stats
        r.replayed = stats.handled
        r.failed = stats.failed
        # Not attempted (a stop, a failure that ended the run): not sent, and not failed either.
        r.not_tried = 0
        r.not_tried = max(0, r.unaccounted())
        r.retries = stats.retries
        r.errors = stats.errors
        r.sdk_fallbacks = self.backend.sdk_fallbacks
        if self.targeted is not None:
            r.set_strays(self.targeted.strays(), str(self.targeted.path))
        spreader = self.spreader
        if spreader is not None and spreader.start is not None:
            r.spread = spreader.summary()
            spreader.finish({"replayed": r.replayed, "failed": r.failed})

    def _state_finished(self) -> bool:
        """Whether the state file records that this input's replay finished (then nothing is sent)."""
        return self.state is not None and self.state.finished

    def _finished(self) -> bool:
        r = self.result
        # Records held back are not done: `--resume --include-held-back` sends them later.
        return (
            not r.dry_run
            and r.replayed == r.selected
            and not (r.failed or r.unroutable or r.unconfirmed or r.held_back or self.stats.aborted)
        )
