"""Counts by peeking every message: where the admin endpoint is out of reach, the only way to count."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.servicebus.settlement import PEEK_PAGE
from sbdlq.models import Counts, Message


async def counts_by_peek(peek: Callable[[Address, int, int], Awaitable[list[Message]]], entity: EntityPath) -> Counts:
    """Active, scheduled, dead-letter and transfer-dead-letter counts of an entity, one page at a time."""
    result = Counts(entity=str(entity))
    for sub_queue in (SubQueue.NONE, SubQueue.DEAD_LETTER, SubQueue.TRANSFER_DEAD_LETTER):
        address = Address(entity, sub_queue)
        sequence = 1
        while True:
            page = await peek(address, sequence, PEEK_PAGE)
            if not page:
                break
            for message in page:
                if sub_queue is SubQueue.DEAD_LETTER:
                    result.dead_letter += 1
                elif sub_queue is SubQueue.TRANSFER_DEAD_LETTER:
                    result.transfer_dead_letter += 1
                elif message.state == "scheduled":
                    result.scheduled += 1
                elif message.state == "active":
                    result.active += 1
            # max(): always make progress, even if a broker hands back an older message.
            sequence = max(sequence, max(m.sequence_number for m in page) + 1)
    return result
