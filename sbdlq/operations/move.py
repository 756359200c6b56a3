"""The batched peek-lock loop that resubmit and purge share.

Rules it keeps, whatever the action: a message is settled only after its action
succeeded (send then complete, export then complete); at most `concurrency` messages are
between action and settlement at any moment, so a kill -9 duplicates no more than that;
messages the selection passes over, and messages whose action failed, keep their lock until the
run ends (so the loop never receives them twice) and are then released (`Backend.release`: on a
namespace an abandon, which adds 1 to their delivery count; the emulator gives them back
untouched); locks are renewed
before they lapse; an interrupted run lets the chunks in flight finish and releases the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import TypeVar

from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.errors import SbdlqError, TransientError
from sbdlq.models import Message
from sbdlq.operations.browse import dlq_count, iter_messages
from sbdlq.operations.sizing import LARGE_BODY_BYTES, BatchSizer
from sbdlq.paths import Address
from sbdlq.selection import Selection

T = TypeVar("T")

RETRY_ATTEMPTS = 5
RETRY_BASE_S = 0.1
RETRY_CAP_S = 3.0
# Settle and renew calls carry at most this many lock tokens.
SETTLE_CHUNK = 500
# Empty receives retried (waiting 2, 4, 8 s) while the DLQ's count says messages this run has
# not seen are still there: over a far link an empty receive is not an empty DLQ.
EMPTY_RETRIES = 3
# Messages a peek asks for when still_in checks which settled-or-lost messages are still there.
STILL_IN_PAGE = 1000


@dataclass
class LoopStats:
    """What the loop did; the operations turn it into their results."""

    handled: int = 0
    failed: int = 0
    #: received, did not match the selection, left in the DLQ
    not_matching: int = 0
    retries: int = 0
    #: never tried: in the DLQ when the run ended without having received them
    not_tried: int = 0
    #: copied (sent, exported) but still in the DLQ: their complete failed or their lock was lost
    left_beside_copy: int = 0
    #: the sequence numbers of those
    left_sequences: list[int] = field(default_factory=list)
    #: lost their lock before their action: nothing done with them, left for a later batch
    let_go: int = 0
    renewals: int = 0
    errors: list[str] = field(default_factory=list)
    #: set by an action when going on is pointless (target disabled, disk full, ...)
    aborted: str | None = None

    def error(self, text: str) -> None:
        """Keep the first few distinct error lines for the summary."""
        if text not in self.errors and len(self.errors) < 5:
            self.errors.append(text)

    def left_beside(self, messages: Sequence[Message]) -> None:
        """Count messages copied (sent, exported) whose original is still in the DLQ."""
        self.left_beside_copy += len(messages)
        self.left_sequences.extend(m.sequence_number for m in messages)

    def abort(self, text: str) -> None:
        """Stop taking new messages; what is in flight finishes, the rest is released."""
        self.error(text)
        if self.aborted is None:
            self.aborted = text


async def retrying(
    call: Callable[[], Awaitable[T]],
    stats: LoopStats,
    *,
    attempts: int = RETRY_ATTEMPTS,
    before_retry: Callable[[TransientError], Awaitable[None]] | None = None,
) -> T:
    """Retry transient failures with bounded exponential backoff and full jitter.

    `before_retry` runs after the wait, before each retry: where a failed call may have done
    its work all the same, it learns what was done (and raises the error to stop instead).
    """
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except TransientError as exc:
            if attempt == attempts:
                raise
            stats.retries += 1
            await asyncio.sleep(random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2 ** (attempt - 1))))
            if before_retry is not None:
                await before_retry(exc)
    raise AssertionError("unreachable")


class RateLimiter:
    """At most `rate` messages per second (None: unlimited)."""

    def __init__(self, rate: float | None) -> None:
        self.interval = 1.0 / rate if rate else 0.0
        self.next_at = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        """Wait until n more messages fit under the rate."""
        if not self.interval:
            return
        async with self.lock:
            now = time.monotonic()
            start = max(now, self.next_at)
            self.next_at = start + n * self.interval
            if start > now:
                await asyncio.sleep(start - now)


class LockKeeper:
    """Renews the locks of held messages when half of each lock has run out.

    Timing uses the local monotonic clock from the moment a message is held, not the
    broker's locked_until, so a skewed client clock can neither make it renew in a busy
    loop nor too late; locked_until only shortens the wait when the broker's lock is
    shorter than the entity's lock duration says.
    """

    def __init__(self, backend: Backend, address: Address, stats: LoopStats, lock_duration_s: float) -> None:
        self.backend = backend
        self.address = address
        self.stats = stats
        self.lock_duration_s = max(lock_duration_s, 0.1)
        self.held: dict[str, Message] = {}
        self.renew_at: dict[str, float] = {}
        self.lost: set[str] = set()
        self.task: asyncio.Task[None] | None = None
        #: tokens whose renewal is on its way, and those renewals: a slow one holds back no other
        self.renewing: set[str] = set()
        self.renewals: set[asyncio.Task[None]] = set()

    def _half_life(self, m: Message, wall: datetime) -> float:
        duration = self.lock_duration_s
        if m.locked_until is not None:
            left = (m.locked_until - wall).total_seconds()
            if 0 < left < duration:
                duration = left
        return duration / 2

    def hold(self, messages: Sequence[Message]) -> None:
        """Keep these locks alive until released."""
        now = time.monotonic()
        wall = datetime.now(UTC)  # once a batch: a clock read per message was a hot spot
        # A batch's locks mostly end at one time: each distinct end is worked out once.
        half: dict[datetime | None, float] = {}
        for m in messages:
            if m.lock_token:
                self.held[m.lock_token] = m
                until = m.locked_until
                wait = half.get(until)
                if wait is None:
                    wait = half[until] = self._half_life(m, wall)
                self.renew_at[m.lock_token] = now + wait
        if self.task is None and self.held:
            self.task = asyncio.create_task(self._run())

    def forget_bodies(self, messages: Iterable[Message]) -> None:
        """Keep only what renewing and releasing need: a large body must not stay for the whole run."""
        for m in messages:
            if m.lock_token in self.held and m.body:
                self.held[m.lock_token] = replace(m, body=b"")

    def release(self, messages: Iterable[Message]) -> None:
        """Stop renewing these (settled, or about to be released)."""
        for m in messages:
            if m.lock_token:
                self.held.pop(m.lock_token, None)
                self.renew_at.pop(m.lock_token, None)

    def is_lost(self, m: Message) -> bool:
        return m.lock_token in self.lost

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            renewing = self.renewing
            due = [
                self.held[t] for t, at in self.renew_at.items() if at <= now and t in self.held and t not in renewing
            ]
            for i in range(0, len(due), SETTLE_CHUNK):
                # Each renewal on its own: one waiting on a slow link delays no lock due after it.
                part = due[i : i + SETTLE_CHUNK]
                renewing.update(str(m.lock_token) for m in part)
                task = asyncio.create_task(self._renew(part))
                self.renewals.add(task)
                task.add_done_callback(self.renewals.discard)
            waiting = (at for t, at in self.renew_at.items() if t not in renewing)
            next_at = min(waiting, default=time.monotonic() + self.lock_duration_s / 2)
            # Always sleep a little: a renewal that returns at once must not become a busy loop.
            await asyncio.sleep(min(max(0.01, next_at - time.monotonic()), self.lock_duration_s / 2))

    async def _renew(self, due: list[Message]) -> None:
        try:
            await self._renew_due(due)
        except Exception as exc:  # never a task's exception left unretrieved
            self.stats.error(f"lock renewal failed: {type(exc).__name__}: {exc}")
        finally:
            self.renewing.difference_update(str(m.lock_token) for m in due)

    async def _renew_due(self, due: list[Message]) -> None:
        try:
            lost = await retrying(lambda: self.backend.renew_locks(self.address, due), self.stats)
        except SbdlqError as exc:
            self.stats.error(f"lock renewal failed: {exc.message}")
            # Try again soon; a lock that lapses meanwhile shows up as lost at settlement.
            retry_at = time.monotonic() + min(1.0, self.lock_duration_s / 8)
            for m in due:
                if m.lock_token in self.renew_at:
                    self.renew_at[m.lock_token] = retry_at
            return
        self.stats.renewals += 1
        lost_tokens = {m.lock_token for m in lost}
        now = time.monotonic()
        for m in due:
            if m.lock_token is None or m.lock_token not in self.held:
                continue  # settled while the renewal was on its way
            if m.lock_token in lost_tokens:
                self.lost.add(m.lock_token)
                self.release([m])
            else:
                self.renew_at[m.lock_token] = now + self.lock_duration_s / 2

    async def stop(self) -> None:
        """Stop renewing; the caller releases what is still held."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
            self.task = None
        renewals = list(self.renewals)
        for task in renewals:
            task.cancel()
        await asyncio.gather(*renewals, return_exceptions=True)


#: Does the work for a chunk and settles what succeeded; returns the messages it left
#: unsettled (their lock is kept until the run ends, then released).
Action = Callable[[list[Message]], Awaitable[list[Message]]]


async def _wait_all(tasks: set[asyncio.Task[None]]) -> None:
    """Wait for tasks without cancelling them (unlike gather); raise the first failure."""
    if not tasks:
        return
    done, _ = await asyncio.wait(set(tasks))
    failure: BaseException | None = None
    for t in done:
        if not t.cancelled() and t.exception() is not None and failure is None:
            failure = t.exception()
    if failure is not None:
        raise failure


class LockedLoop:
    """Receive batches under lock; run `action` on chunks of matches; release the rest at the end.

    `run(limit, last_sequence)`: `limit` bounds how many matches are taken (the count at the
    start of the run, so a run into a queue whose consumer keeps failing still ends);
    `last_sequence`, when known from a scan, ends the run once the loop is past the last match.

    A pipeline, for a far broker: the next batch is received while the chunks of this one
    are worked on (one batch ahead at most, its locks renewed like the others), and chunks
    are cut from the stream of matches rather than from each batch, so they stay full: a
    batch of 100 at --concurrency 32 no longer ends in a chunk of 4 that costs the round
    trips of 32 (the rest waits, locked, for the next batch).
    """

    def __init__(
        self,
        backend: Backend,
        source: Address,
        *,
        selection: Selection,
        action: Action,
        stats: LoopStats,
        lock_duration_s: float = 60.0,
        batch_size: int,
        concurrency: int,
        chunk_size: int | None = None,
        on_done: Callable[[int], None] | None = None,
        large_bodies: int | None = None,
    ) -> None:
        self.backend = backend
        self.source = source
        self.selection = selection
        self.action = action
        self.stats = stats
        self.on_done = on_done
        concurrency = max(1, concurrency)
        # Receives ask for `batch_size` messages while bodies are small, `large_bodies` (default
        # `concurrency`) while they are large: 100 bodies of 100 MB would be 10 GB.
        self.sizer = BatchSizer(batch_size, large_bodies or concurrency)
        # One chunk of `concurrency` messages: against a far broker the throughput is the same as
        # several smaller chunks (the bound on messages between send and complete is what limits
        # it: each takes a send and a complete round trip), and nearby it takes fewer round trips.
        self.chunk = max(1, min(chunk_size or concurrency, concurrency))
        # chunk * calls <= concurrency: the bound on messages between action and settlement.
        self.calls = asyncio.Semaphore(max(1, concurrency // self.chunk))
        self.keeper = LockKeeper(backend, source, stats, lock_duration_s)
        self.taken = 0
        self.pending: set[asyncio.Task[None]] = set()
        self.queued: list[Message] = []  # matches received, not yet handed to a chunk
        self.ahead: asyncio.Task[list[Message]] | None = None  # the next batch, on its way
        self.broken = False  # a chunk raised: dispatch no more, the error surfaces when waited for
        #: how many let-go messages (see _still_held) may still be taken again
        self.retakes = 0

    async def run(self, limit: int, last_sequence: int | None) -> None:
        """Take up to `limit` matches, batch by batch, until the DLQ or the scan's last match ends."""
        self.retakes = limit
        try:
            empty = 0
            self.ahead = self._receive_ahead(limit, wait_s=1.0)
            while self.ahead is not None:
                batch = await self._arrived()
                if not batch:
                    empty += 1
                    more = (
                        self.taken < limit
                        and self.stats.aborted is None
                        and empty <= EMPTY_RETRIES
                        and await self._unseen_left()
                    )
                    if more:
                        self.ahead = self._receive_ahead(limit, wait_s=float(2**empty))
                    await self._dispatch(final=not more)
                    continue
                empty = 0
                more = await self._take(batch, limit, last_sequence)
                del batch  # what is not chosen is held without its body until the run ends
                if more and self.ahead is None:
                    # Large bodies: one batch in memory at a time, so wait for this one's chunks.
                    await _wait_all(self.pending)
                    self.ahead = self._receive_ahead(limit, wait_s=1.0)
            await _wait_all(self.pending)
        finally:
            await self._wind_down()

    async def _take(self, batch: list[Message], limit: int, last_sequence: int | None) -> bool:
        """Sort a batch, start receiving the next while bodies are small, hand out full chunks; whether to go on."""
        self.sizer.seen(batch)
        chosen, beyond = self._sort(batch, limit, last_sequence)
        if beyond:
            # Past the last match the scan found: release them now, they are not ours.
            self.keeper.release(beyond)
            await _release(self.backend, self.source, beyond, self.stats)
        more = not beyond and self.taken < limit and self.stats.aborted is None
        estimate = self.sizer.estimate
        small = estimate is not None and estimate < LARGE_BODY_BYTES
        if more and small:
            self.ahead = self._receive_ahead(limit, wait_s=1.0)
        self.queued += chosen
        # Large bodies are not kept back to fill a chunk: memory stays bounded by the batch.
        await self._dispatch(final=not more or not small)
        return more

    def _receive_ahead(self, limit: int, *, wait_s: float) -> asyncio.Task[list[Message]]:
        """Start receiving the next batch; its messages are held as soon as they arrive."""

        async def receive() -> list[Message]:
            batch = await self._receive(limit, wait_s=wait_s)
            self.keeper.hold(batch)
            return batch

        return asyncio.create_task(receive())

    async def _arrived(self) -> list[Message]:
        """The batch received ahead; raises what its receive raised."""
        ahead, self.ahead = self.ahead, None
        assert ahead is not None
        return await ahead

    async def _receive(self, limit: int, *, wait_s: float = 1.0) -> list[Message]:
        """The next batch, under lock."""
        want = self.sizer.next_count()
        if self.selection.is_empty:
            want = min(want, limit - self.taken)
        return await retrying(
            lambda: self.backend.receive(self.source, want, mode=ReceiveMode.PEEK_LOCK, max_wait_s=wait_s),
            self.stats,
        )

    async def _unseen_left(self) -> bool:
        """Whether the DLQ holds more messages than this run holds locked: some were not received yet."""
        left = await dlq_left(self.backend, self.source, self.stats)
        return left is not None and left > len(self.keeper.held)

    def _sort(self, batch: list[Message], limit: int, last_sequence: int | None) -> tuple[list[Message], list[Message]]:
        """Split a batch into the matches to act on and those past the scan's last match."""
        chosen: list[Message] = []
        beyond: list[Message] = []
        # Originals left beside a copy this run sent: a second copy would be a second duplicate.
        copied = set(self.stats.left_sequences)
        for m in batch:
            if last_sequence is not None and m.sequence_number > last_sequence:
                beyond.append(m)
            elif m.sequence_number in copied:
                self.keeper.forget_bodies([m])  # held until the end, then released: counted already
            elif self.taken < limit and self.selection.matches(m):
                chosen.append(m)
                self.taken += 1
            else:
                self.stats.not_matching += 1
                self.keeper.forget_bodies([m])
        return chosen, beyond

    async def _dispatch(self, *, final: bool) -> None:
        """Hand the queued matches to chunks, at most `calls` at once; a short rest waits for more unless final."""
        while self.queued and (final or len(self.queued) >= self.chunk):
            await self.calls.acquire()
            if self.stats.aborted is not None or self.broken:
                self.calls.release()
                break
            items, self.queued = self.queued[: self.chunk], self.queued[self.chunk :]
            self.pending.add(asyncio.create_task(self._run_chunk(items)))
        self._reap()

    def _reap(self) -> None:
        """Forget finished chunks; raise the first failure among them."""
        done = {t for t in self.pending if t.done()}
        self.pending -= done
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                # Kept until waited for by _wind_down too: the others still finish.
                raise t.exception()  # type: ignore[misc]

    async def _run_chunk(self, items: list[Message]) -> None:
        """Act on one chunk; stop renewing what it settled."""
        keeper = self.keeper
        try:
            items = await self._still_held(items)
            unsettled = await self.action(items) if items else []
            # Settled ones need no more renewal; unsettled ones stay held until the end.
            keep = {m.lock_token for m in unsettled}
            keeper.release(m for m in items if m.lock_token not in keep)
            keeper.forget_bodies(unsettled)
        except BaseException:
            self.broken = True
            raise
        finally:
            self.calls.release()
            if self.on_done:
                self.on_done(len(items))

    async def _still_held(self, items: list[Message]) -> list[Message]:
        """The chunk's messages whose lock the run still holds; the others are let go.

        A lock lost before the action (a renewal refused, or the receiver's link gone with a
        connection blip or a broker restart) cannot be settled: a copy sent of such a message
        would stay beside its original, and someone else may hold it now. So nothing is done
        with them: they count as not taken, for a later batch to receive again (`let_go`), and
        what was in flight when the link went is the only exposure.
        """
        keeper = self.keeper
        mine = [m for m in items if not keeper.is_lost(m)]
        if mine:
            try:
                mine = await self.backend.still_held(self.source, mine)
            except SbdlqError:
                pass  # cannot tell: the settlement will say which were lost
        if len(mine) == len(items):
            return items
        kept = {id(m) for m in mine}
        gone = [m for m in items if id(m) not in kept]
        keeper.release(gone)
        keeper.lost.update(m.lock_token for m in gone if m.lock_token)
        # Taken again later, up to the run's limit in all: locks lost over and over still end the run.
        again = min(len(gone), self.retakes)
        self.retakes -= again
        self.taken -= again
        self.stats.let_go += len(gone)
        self.stats.error(
            f"{len(gone)} message(s) lost their lock before they were handled: nothing was done with them"
        )
        return mine

    async def _wind_down(self) -> None:
        """Let chunks in flight finish, stop renewing, release what is still held."""
        # Let chunks in flight finish (even on Ctrl-C): cutting one between send and
        # complete would leave a copy sent and its original still in the DLQ.
        with contextlib.suppress(BaseException):
            await _wait_all(self.pending)
        if self.ahead is not None:
            # A batch received ahead is held (or failed): released below with the rest.
            with contextlib.suppress(BaseException):
                await self._arrived()
        await self.keeper.stop()
        # Not matching, failed, queued and never-started messages: released, not completed, so
        # they are available again at once instead of after their lock lapses.
        rest = [m for m in self.keeper.held.values() if not self.keeper.is_lost(m)]
        self.keeper.release(rest)
        with contextlib.suppress(SbdlqError):
            await _release(self.backend, self.source, rest, self.stats)


async def _release(backend: Backend, source: Address, messages: list[Message], stats: LoopStats) -> None:
    for i in range(0, len(messages), SETTLE_CHUNK):
        part = messages[i : i + SETTLE_CHUNK]
        await retrying(lambda p=part: backend.release(source, p), stats)  # type: ignore[misc]


@dataclass
class Plan:
    """What a moving run will take: how many, and (after a scan) where the last match is."""

    selected: int
    last_sequence: int | None = None
    #: the DLQ's count the plan was made from (None after a scan)
    counted: int | None = None
    #: messages the scan read and the selection passed over (0 without a scan)
    passed_over: int = 0


async def plan_run(
    backend: Backend,
    source: Address,
    selection: Selection,
    *,
    max_count: int | None,
    scan: bool,
    progress: Callable[[int | None], Callable[[int], None]] | None = None,
) -> Plan:
    """Count what a run will take: a browse (no locks) when selecting, else the DLQ's count."""
    if scan or not selection.is_empty:
        plan = Plan(0)
        tick = progress(None) if progress else None

        def passed() -> None:
            plan.passed_over += 1

        scan_all = iter_messages(backend, source, selection=selection, limit=max_count, on_page=tick, on_passed=passed)
        async for m in scan_all:
            plan.selected += 1
            plan.last_sequence = m.sequence_number
        return plan
    counted = dlq_count(await backend.counts(source.entity), source.sub_queue)
    return Plan(plan_limit(max_count, counted), counted=counted)


async def dlq_left(backend: Backend, source: Address, stats: LoopStats) -> int | None:
    """How many messages the DLQ (or transfer DLQ) holds now; None when it cannot be counted."""
    try:
        counts = await retrying(lambda: backend.counts(source.entity), stats)
    except SbdlqError:
        return None
    return dlq_count(counts, source.sub_queue)


async def still_in(backend: Backend, source: Address, messages: Sequence[Message], stats: LoopStats) -> list[Message]:
    """Of messages whose settlement failed or said "lock lost", those still in the queue.

    A settlement whose answer was lost has been done all the same: its retry finds the lock
    gone. Peeking their sequence numbers tells the two apart, so the summary counts what left
    the DLQ rather than what one call returned. When the peek fails, all of them (the cautious count).
    """
    if not messages:
        return []
    wanted = sorted({m.sequence_number for m in messages})
    seen: set[int] = set()
    try:
        if wanted[-1] - wanted[0] >= STILL_IN_PAGE * len(wanted):
            # Sparse (a selective scan's chunk): one peek each is fewer calls than paging the range.
            for seq in wanted:
                page = await retrying(partial(backend.peek, source, seq, 1), stats)
                seen.update(m.sequence_number for m in page)
        else:
            at, last = wanted[0], wanted[-1]
            while at <= last:
                page = await retrying(partial(backend.peek, source, at, min(STILL_IN_PAGE, last - at + 1)), stats)
                if not page:
                    break
                seen.update(m.sequence_number for m in page)
                at = page[-1].sequence_number + 1
    except SbdlqError:
        return list(messages)
    return [m for m in messages if m.sequence_number in seen]


async def complete_or_left(
    backend: Backend, source: Address, messages: Sequence[Message], stats: LoopStats
) -> tuple[list[Message], SbdlqError | None]:
    """Complete messages, retrying transient failures: those still in the queue afterwards, and
    the error that stopped the complete (None when it went through).

    Still there: their lock was lost, or the complete failed. A message whose complete's
    answer was lost is gone, and not among them (see still_in).
    """
    error: SbdlqError | None = None
    try:
        lost = await retrying(lambda: backend.complete(source, messages), stats)
    except SbdlqError as exc:
        lost, error = list(messages), exc
    return await still_in(backend, source, lost, stats), error


def report_unreceived(selected: int, missing: int, source: Address, note: Callable[[str], None]) -> None:
    """Say so when selected messages never came: another receiver took or holds them, or they went."""
    if missing > 0:
        note(
            f"note: {missing} of the {selected} selected message(s) were not received (taken by another "
            f"receiver, locked elsewhere, or gone); any still in {source} are untouched"
        )


def plan_limit(max_count: int | None, available: int) -> int:
    """How many messages a run may take: --max, bounded by what was there at the start."""
    bound = max(available, 0)
    return bound if max_count is None else min(max_count, bound)
