"""The SDK handlers the backend keeps, the messages it holds locked on them, and how a
complete of many is cut into runs of consecutive deliveries (see sdk_compat.settle_run)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sbdlq.errors import InvalidOperation
from sbdlq.models import Message

T = TypeVar("T")

#: settlements awaiting their outcome on one receiver at once. azure-servicebus (pyamqp) has
#: each one poll the connection for its outcome, one frame per poll, waiting the socket
#: timeout when none is there: hundreds at once starve each other (500 took over 30 s where
#: 100 take one round trip), so more wait their turn.
SETTLING_MAX = 100


@dataclass(eq=False)
class Link:
    """A cached SDK sender or receiver, and the lock that keeps its requests one at a time.

    azure-servicebus (pyamqp) numbers an outgoing transfer before it awaits the socket and
    counts it after: two sends, or two `$management` requests (peek, renew), overlapped on
    one handler can go out with the same delivery-id, and the broker then closes the
    connection ("sequencing error"); the SDK shuts the handler down and every call sharing
    it fails. So transfers on one handler never overlap; settlements (dispositions) may.
    """

    key: Any
    handler: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    opened: bool = False
    #: the backend's count of wire failures when it opened (a sender opened before the last one is replaced)
    epoch: int = 0
    #: settlements awaiting their outcome on this link (see SETTLING_MAX)
    settling: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(SETTLING_MAX))


@dataclass(slots=True)
class Held:
    """A locked SDK message, the receiver its lock token is bound to, and the AMQP link it came on."""

    receiver: Link
    sdk_message: Any
    locked_until: datetime | None
    # The SDK's link object when the message arrived: a receiver that reopened since (after an
    # error, inside the SDK's own retries) cannot settle it, as its lock went with the old link.
    amqp_link: Any = None


def lock_token(message: Message, verb: str, what: str) -> str:
    """A message's lock token; InvalidOperation for one that was never locked."""
    if message.lock_token is None:
        raise InvalidOperation(
            f"cannot {verb} message {message.sequence_number} of {what}: it is not locked "
            "(peeked or received and deleted)"
        )
    return message.lock_token


#: the fewest messages worth a disposition of their own range; fewer are settled one by one
MIN_RUN = 2


def runs_of(items: Sequence[tuple[T, Link | None, int | None]]) -> tuple[list[T], list[tuple[Link, list[T]]]]:
    """Split (item, link, delivery id) into items to settle one by one (no link or id, or alone)
    and runs: items of one link whose delivery ids follow each other, in id order."""
    singles: list[T] = []
    keyed: list[tuple[int, int, T, Link]] = []
    for item, link, delivery_id in items:
        if link is None or delivery_id is None:
            singles.append(item)
        else:
            keyed.append((id(link), delivery_id, item, link))
    keyed.sort(key=lambda k: (k[0], k[1]))
    runs: list[tuple[Link, list[T]]] = []
    current: list[T] = []
    for i, (link_id, delivery_id, item, _link) in enumerate(keyed):
        if current and not (keyed[i - 1][0] == link_id and keyed[i - 1][1] + 1 == delivery_id):
            _close_run(runs, singles, keyed[i - 1][3], current)
            current = []
        current.append(item)
    if current:
        _close_run(runs, singles, keyed[-1][3], current)
    return singles, runs


def _close_run(runs: list[tuple[Link, list[T]]], singles: list[T], link: Link, run: list[T]) -> None:
    if len(run) >= MIN_RUN:
        runs.append((link, run))
    else:
        singles.extend(run)
