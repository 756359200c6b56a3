"""Sending copies to a target, written once for resubmit and replay.

The target checks that refuse a run before anything moves, and the send of one chunk of
copies: transient errors retried, a batch the broker refuses because of one message retried
message by message, and any other failure stopping the run (the target takes nothing).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import Generic, TypeVar

from sbdlq.addresses import EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, InvalidOperation, SbdlqError, SendUnconfirmed, TransientError
from sbdlq.models import EntityInfo, OutboundMessage
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.ratelimit import RateLimiter
from sbdlq.operations.retries import retrying

T = TypeVar("T")

# Errors that one message can cause (no session id for a session queue, a bad TTL):
# retry such a batch one by one. Anything else means the target takes nothing.
PER_MESSAGE = (InvalidOperation, BadInput)


def check_rate(rate: float | None) -> None:
    """Refuse a --rate that is not a positive number (None: no limit)."""
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise BadInput(f"invalid --rate {rate}: give a positive number of messages per second")


def check_target(info: EntityInfo, target: EntityPath, *, new_message_id: bool, command: str = "resubmit") -> None:
    """Refuse a subscription, and a duplicate-detecting target when copies keep their ids."""
    if info.kind == "subscription":
        raise BadInput(f"cannot send to subscription {target}: {command} to its topic with --to TOPIC")
    if info.requires_duplicate_detection and not new_message_id:
        # A copy that keeps its id inside the detection window is accepted and silently dropped
        # by the broker, and its original would then be completed: the message would be gone.
        # Neither the SDK nor the protocol reports the drop, so refuse before anything moves.
        raise BadInput(
            f"{target} has duplicate detection: copies that keep their message id may be dropped by the "
            + ("broker while their originals are completed" if command == "resubmit" else "broker unseen"),
            hint="rerun with --new-message-id",
        )


#: Sends the copies of items and (when it settles them too) returns the items it did not
#: move because their lock was lost; raises when nothing was sent (SendUnconfirmed: some may have been).
Deliver = Callable[[list[T], list[OutboundMessage]], Awaitable[list[T]]]

#: Told of the items whose copy may have reached the target (a send whose answer was lost):
#: never sent again in this run, and counted apart (resubmit: left beside their copy).
Unconfirmed = Callable[[list[T]], None]


@dataclass(eq=False)
class CopySender(Generic[T]):
    """Sends the copies of items (DLQ messages, file records) to one target under --rate."""

    backend: Backend
    target: EntityPath
    stats: LoopStats
    limiter: RateLimiter
    _: KW_ONLY
    copy_of: Callable[[T], OutboundMessage]
    name_of: Callable[[T], str]
    #: Sends and settles in one transaction (resubmit where the backend moves atomically);
    #: None: a plain send.
    deliver: Deliver[T] | None = None
    #: The items whose copy may have reached the target (see Unconfirmed); the send returns them
    #: with the refused ones, as not accepted.
    unconfirmed: Unconfirmed[T] = lambda _: None

    async def _send(self, items: list[T], copies: list[OutboundMessage]) -> list[T]:
        await self.backend.send(self.target, copies)
        return []

    async def send(self, items: list[T], *, charged: bool = False) -> list[T]:
        """Send copies of the items; returns the items whose copy was not accepted (or, when the
        deliver settles, that were not moved), and those whose copy may have been (unconfirmed).

        Only a call that provably sent nothing is tried again (a transient error before the
        send, a batch refused whole); a send whose answer was lost is never repeated.
        """
        copies = [self.copy_of(m) for m in items]
        if not charged:
            await self.limiter.take(len(items))
        stats, target = self.stats, self.target
        try:
            # A deliver that settles too is one transaction: retried whole, it cannot duplicate.
            deliver = self.deliver or self._send
            lost = await retrying(lambda: deliver(items, copies), stats)
        except SendUnconfirmed as exc:
            return await self._part_sent(items, exc)
        except PER_MESSAGE as exc:
            return await self._one_by_one(items, exc)
        except SbdlqError as exc:
            # The target takes nothing (disabled, missing, full, unreachable): stop the run.
            stats.failed += len(items)
            stats.abort(f"send to {target} failed: {exc.message}")
            return items
        if lost:
            # Their lock went before the move: neither copied nor settled, still where they were.
            stats.failed += len(lost)
            stats.error(f"{len(lost)} message(s) lost their lock before they were moved: not copied, left in place")
        return lost

    async def _one_by_one(self, items: list[T], exc: SbdlqError) -> list[T]:
        """A batch refused because of one message: each sent alone, so one bad message holds back no other."""
        if len(items) == 1:
            self.stats.failed += 1
            self.stats.error(f"send to {self.target} refused {self.name_of(items[0])}: {exc.message}")
            return items
        refused: list[T] = []
        for m in items:
            # Already counted against --rate when the batch was tried.
            refused += await self.send([m], charged=True)
        return refused

    async def _part_sent(self, items: list[T], exc: SendUnconfirmed) -> list[T]:
        """A send that stopped part way: the accepted ones are sent, the unconfirmed ones are handed
        to `unconfirmed` (never sent again); the rest were not sent: after an unanswered send they
        are returned untried (the run stops), after a refusal tried as a batch would be."""
        sent, unknown = exc.sent, exc.unknown
        maybe = items[sent : sent + unknown]
        rest = items[sent + unknown :]
        self.stats.error(exc.message)
        if maybe:
            # The connection went: the rest's locks may have gone with it, and only a new chunk
            # proves them (LockedLoop._still_held). Not sent: not tried, released at the end.
            self.unconfirmed(maybe)
            return maybe + rest
        if not rest:
            return maybe
        cause = exc.__cause__
        if not isinstance(cause, SbdlqError) or isinstance(cause, TransientError):
            # Never sent (a batch the broker refused as busy after others went): sent now, with
            # the retries of any send.
            return await self.send(rest, charged=True)
        if isinstance(cause, PER_MESSAGE):
            return await self._one_by_one(rest, cause)
        self.stats.failed += len(rest)
        self.stats.abort(f"send to {self.target} failed: {cause.message}")
        return rest
