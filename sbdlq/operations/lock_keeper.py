"""LockKeeper: renews the locks a moving run holds before they lapse, and notes those it lost."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend
from sbdlq.errors import SbdlqError
from sbdlq.models import Message
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.retries import retrying

# Settle and renew calls carry at most this many lock tokens.
SETTLE_CHUNK = 500


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
        #: when each lock ends by the local clock, as of its last renewal sent and answered
        self.expires_at: dict[str, float] = {}
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
                self.expires_at[m.lock_token] = now + 2 * wait
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
                self.expires_at.pop(m.lock_token, None)

    def is_lost(self, m: Message) -> bool:
        """Whether a lock is gone: reported lost, or past its end by the local clock (renewals kept
        failing). Nothing may be sent for such a message: its original could not be settled."""
        token = m.lock_token
        if token in self.lost:
            return True
        ends = self.expires_at.get(token or "")
        return ends is not None and time.monotonic() >= ends

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
        sent = time.monotonic()  # a renewed lock runs from when the request went, at the latest
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
                self.expires_at[m.lock_token] = sent + self.lock_duration_s

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
