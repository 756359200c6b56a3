"""The move loop that takes no locks: where the backend moves in one transaction (the local emulator).

Each batch is read, chosen from, copied and moved inside one store transaction
(`Backend.move_available`), so no message is ever locked, between send and complete, or
anywhere but in one queue or the other: a kill -9 leaves both or neither. It skips a
receive's lock writes and a second commit per batch, which the locked loop needs only
because a namespace settles in a second round trip.

It covers the plain path only. The first time a batch fails (a copy the target refuses, a
busy or full store), that batch rolls back whole and `run` returns False: the locked loop
takes over the rest of the run, with its per-message retries and its error reporting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import SbdlqError
from sbdlq.models import Message, OutboundMessage
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.sizing import BatchSizer
from sbdlq.selection import Selection


class UnlockedMove:
    """Move up to `limit` matches batch by batch, each batch one transaction."""

    def __init__(
        self,
        backend: Backend,
        source: Address,
        target: EntityPath,
        *,
        selection: Selection,
        copy_of: Callable[[Message], OutboundMessage],
        stats: LoopStats,
        batch_size: int,
        large_bodies: int,
        on_done: Callable[[int], None] | None = None,
        before_batch: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.backend = backend
        self.source = source
        self.target = target
        self.selection = selection
        self.copy_of = copy_of
        self.stats = stats
        self.on_done = on_done
        #: asked before each batch whether to go on (False: the run was stopped, see stats.aborted)
        self.before_batch = before_batch
        self.sizer = BatchSizer(batch_size, large_bodies)
        #: matches moved so far: the locked loop that takes over asks only for the rest
        self.taken = 0
        #: messages passed over (counted in stats.not_matching)
        self.skipped = 0

    async def run(self, limit: int, last_sequence: int | None) -> bool:
        """Move until `limit` matches moved, the DLQ ends or the scan's last match is passed;
        False when a batch failed and nothing of it moved (the locked loop goes on from there).

        A second sweep from the start takes what another receiver held while the first went
        by (its lock lapsed, or it was abandoned), as the locked loop would have received it
        later; it runs only when the first fell short of the limit.
        """
        for sweep in (1, 2):
            if self.taken >= limit or self.stats.aborted is not None:
                break
            if not await self._sweep(limit, last_sequence, count_skipped=sweep == 1):
                # The locked loop reads from the head again and counts what it passes over itself.
                self.stats.not_matching -= self.skipped
                return False
        return True

    async def _sweep(self, limit: int, last_sequence: int | None, *, count_skipped: bool) -> bool:
        """One pass over the DLQ in sequence order; False when a batch failed."""
        after = -1
        stats = self.stats
        while self.taken < limit and stats.aborted is None:
            if self.before_batch is not None and not await self.before_batch():
                break
            want = self.sizer.next_count()
            if self.selection.is_empty:
                want = min(want, limit - self.taken)
            # What a batch decided counts only once its transaction committed.
            tally = _Tally()

            def choose(batch: list[Message], tally: _Tally = tally) -> list[tuple[Message, OutboundMessage]]:
                return self._choose(batch, tally, limit, last_sequence)

            try:
                moved = await self.backend.move_available(
                    self.source, self.target, after_sequence=after, max_count=want, choose=choose
                )
            except SbdlqError:
                return False
            if moved is None:
                return False  # the backend cannot: every batch goes through the locked loop
            self.sizer.seen(tally.seen)
            self.taken += moved.moved
            stats.handled += moved.moved
            if count_skipped:
                stats.not_matching += tally.not_matching
                self.skipped += tally.not_matching
            if self.on_done is not None and moved.moved:
                self.on_done(moved.moved)
            if moved.read == 0 or tally.past_last:
                break
            after = moved.last_sequence
        return True

    def _choose(
        self, batch: list[Message], tally: _Tally, limit: int, last_sequence: int | None
    ) -> list[tuple[Message, OutboundMessage]]:
        """The matches of a batch with their copies, within the limit and up to the scan's last match."""
        tally.seen = batch
        pairs: list[tuple[Message, OutboundMessage]] = []
        room = limit - self.taken
        matches, copy_of = self.selection.matches, self.copy_of
        for m in batch:
            if last_sequence is not None and m.sequence_number > last_sequence:
                tally.past_last = True
                break
            if len(pairs) < room and matches(m):
                pairs.append((m, copy_of(m)))
            else:
                tally.not_matching += 1
        return pairs


class _Tally:
    """What choosing one batch saw, kept apart until its transaction commits."""

    __slots__ = ("not_matching", "past_last", "seen")

    def __init__(self) -> None:
        self.seen: list[Message] = []
        self.not_matching = 0
        self.past_last = False
