"""The batched peek-lock loop that resubmit and purge share.

Rules it keeps, whatever the action: a message is settled only after its action
succeeded (send then complete, export then complete); at most `concurrency` messages are
between action and settlement at any moment, so a kill -9 duplicates no more than that;
messages the selection passes over, and messages whose action failed, keep their lock until the
run ends (so the loop never receives them twice) and are then released (`Backend.release`: on a
namespace an abandon, which adds 1 to their delivery count; the emulator gives them back
untouched); locks are renewed
before they lapse; an interrupted run lets the chunks in flight finish and releases the rest.

Its parts live next to it: the plan (planning.py), the lock renewal (lock_keeper.py), the retries
(retries.py), the rate (ratelimit.py), the counts (loop_stats.py) and the policy for a
settlement whose answer was lost (settle_recovery.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.errors import SbdlqError
from sbdlq.models import Message
from sbdlq.operations.lock_keeper import SETTLE_CHUNK, LockKeeper
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.planning import dlq_left
from sbdlq.operations.retries import retrying
from sbdlq.operations.sizing import LARGE_BODY_BYTES, BatchSizer
from sbdlq.selection import Selection

# Empty receives retried (waiting 2, 4, 8 s) while the DLQ's count says messages this run has
# not seen are still there: over a far link an empty receive is not an empty DLQ.
EMPTY_RETRIES = 3


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
        #: sequence numbers chosen and not yet through their chunk (queued, sent, being completed):
        #: a second delivery of one (its lock lapsed meanwhile) is never chosen again
        self.in_flight: set[int] = set()

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
        # Originals left beside a copy this run sent, or still in a chunk (delivered again while
        # their first delivery is queued, sent or being completed): a second copy would be a duplicate.
        copied = set(self.stats.left_sequences) | self.in_flight
        for m in batch:
            if last_sequence is not None and m.sequence_number > last_sequence:
                beyond.append(m)
            elif m.sequence_number in copied:
                self.keeper.forget_bodies([m])  # held until the end, then released: counted already
            elif self.taken < limit and self.selection.matches(m):
                chosen.append(m)
                self.in_flight.add(m.sequence_number)
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
        chosen = items
        try:
            # Left beside a copy by another chunk meanwhile: never copied a second time.
            copied = set(self.stats.left_sequences)
            skipped = [m for m in items if m.sequence_number in copied]
            if skipped:
                keeper.forget_bodies(skipped)
                items = [m for m in items if m.sequence_number not in copied]
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
            self.in_flight.difference_update(m.sequence_number for m in chosen)
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
        self.in_flight.difference_update(m.sequence_number for m in gone)  # nothing done: may come again
        # Taken again later, up to the run's limit in all: locks lost over and over still end the run.
        again = min(len(gone), self.retakes)
        self.retakes -= again
        self.taken -= again
        self.stats.let_go += len(gone)
        self.stats.error(f"{len(gone)} message(s) lost their lock before they were handled: nothing was done with them")
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
