"""The policy for a settlement whose answer was lost or refused: which messages are still in the queue.

A complete whose answer was lost has been done all the same (its retry finds the lock gone), so
what one call returned is not what left the DLQ: `still_in` peeks which are left, and
`complete_or_left` completes with retries and says which stayed. The runs count from these.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend
from sbdlq.errors import SbdlqError
from sbdlq.models import Message
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.retries import retrying

# Messages a peek asks for when still_in checks which settled-or-lost messages are still there.
STILL_IN_PAGE = 1000


async def sequences_in(backend: Backend, source: Address, wanted: Sequence[int], stats: LoopStats) -> set[int]:
    """Which of these sequence numbers the queue holds, by peeking them (raises what the peek raised).

    Dense: one peek from the lowest, as many as the range holds (pages of STILL_IN_PAGE past
    that); sparse (a selective scan's chunks): one peek each, fewer calls than paging the range.
    """
    numbers = sorted(set(wanted))
    seen: set[int] = set()
    if not numbers:
        return seen
    if numbers[-1] - numbers[0] >= STILL_IN_PAGE * len(numbers):
        for seq in numbers:
            page = await retrying(partial(backend.peek, source, seq, 1), stats)
            seen.update(m.sequence_number for m in page)
        return seen & set(numbers)
    at, last = numbers[0], numbers[-1]
    while at <= last:
        page = await retrying(partial(backend.peek, source, at, min(STILL_IN_PAGE, last - at + 1)), stats)
        if not page:
            break
        seen.update(m.sequence_number for m in page)
        at = page[-1].sequence_number + 1
    return seen & set(numbers)


async def still_in(backend: Backend, source: Address, messages: Sequence[Message], stats: LoopStats) -> list[Message]:
    """Of messages whose settlement failed or said "lock lost", those still in the queue.

    A settlement whose answer was lost has been done all the same: its retry finds the lock
    gone. Peeking their sequence numbers tells the two apart, so the summary counts what left
    the DLQ rather than what one call returned. When the peek fails, all of them (the cautious count).
    """
    if not messages:
        return []
    try:
        seen = await sequences_in(backend, source, [m.sequence_number for m in messages], stats)
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
