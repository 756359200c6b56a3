"""The whole namespace at once: every DLQ of the namespace grouped in one pass.

Entities are listed through the backend and counted first, so an empty DLQ costs one count
and no scan. Messages are grouped while they stream past, entity after entity: memory grows
with the number of groups, never with the number of messages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial

from sbdlq.addresses import Address, EntityPath, SubQueue, parse_entity
from sbdlq.backends.base import Backend
from sbdlq.errors import EntityNotFound
from sbdlq.groups import EntityReasonGroup, FingerprintGroup, ReasonGroup
from sbdlq.operations.browse import (
    count_entities,
    count_fingerprints,
    count_into,
    dlq_count,
    group_key,
    is_fingerprint_grouping,
    is_time_grouping,
)
from sbdlq.selection import Selection

#: Given the number of messages to scan, a callback told how many each page held.
Progress = Callable[[int], Callable[[int], None]]


async def nonempty_dlqs(backend: Backend, sub_queue: SubQueue) -> list[tuple[EntityPath, int]]:
    """Every queue and subscription whose (transfer) DLQ holds messages, with that count."""
    found = []
    for counts in await count_entities(backend, None):
        n = dlq_count(counts, sub_queue)
        if n:
            found.append((parse_entity(counts.entity), n))
    return found


async def inspect_namespace(
    backend: Backend,
    sub_queue: SubQueue,
    *,
    by: str = "reason",
    selection: Selection | None = None,
    progress: Progress | None = None,
) -> list[EntityReasonGroup] | list[FingerprintGroup]:
    """Group the messages of every DLQ (or transfer DLQ) of the namespace, per entity and key.

    By fingerprint, a group spans the namespace (one failure wherever it landed) and counts its entities.
    """
    group_key(by)  # a bad --by fails before any I/O
    entities = await nonempty_dlqs(backend, sub_queue)
    on_page = progress(sum(n for _, n in entities)) if progress else None
    if is_fingerprint_grouping(by):
        return await _fingerprints(backend, sub_queue, entities, selection, on_page)
    found: list[EntityReasonGroup] = []
    for entity, _ in entities:
        name = str(entity)
        groups: dict[str, EntityReasonGroup] = {}
        address = Address(entity, sub_queue)
        with contextlib.suppress(EntityNotFound):  # deleted since it was listed: what was read counts
            await count_into(
                groups,
                partial(EntityReasonGroup, entity=name),
                backend,
                address,
                group_key(by, name),
                selection=selection,
                on_page=on_page,
            )
        found.extend(groups.values())
    if is_time_grouping(by):
        return sorted(found, key=lambda g: (g.key, g.entity))
    # The biggest problem of the namespace first, wherever it is.
    return sorted(found, key=lambda g: (-g.count, g.entity, g.key))


async def _fingerprints(
    backend: Backend,
    sub_queue: SubQueue,
    entities: list[tuple[EntityPath, int]],
    selection: Selection | None,
    on_page: Callable[[int], None] | None,
) -> list[FingerprintGroup]:
    groups: dict[str, FingerprintGroup] = {}
    for entity, _ in entities:
        with contextlib.suppress(EntityNotFound):  # deleted since it was listed: what was read counts
            await count_fingerprints(
                groups, backend, Address(entity, sub_queue), selection=selection, on_page=on_page, entity=str(entity)
            )
    return sorted(groups.values(), key=_by_size)


def _by_size(g: ReasonGroup) -> tuple[int, str]:
    return -g.count, g.key
