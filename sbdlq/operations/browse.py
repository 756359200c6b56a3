"""Read-only operations: peek pages, counts, and grouping by reason."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, EntityNotFound
from sbdlq.loopless import pause
from sbdlq.models import Counts
from sbdlq.operations.sizing import BatchSizer
from sbdlq.selection import Selection

if TYPE_CHECKING:
    # Imported where groups are counted: `count` starts without them.
    from sbdlq.groups import FingerprintGroup, ReasonGroup
    from sbdlq.messages import Message  # annotations only: `count` makes no Message

G = TypeVar("G", bound="ReasonGroup")

# Messages per peek: large for scans (fewer round trips), small for `peek --max 20`.
PAGE = 1000
MIN_PAGE = 100
# Messages per peek while bodies are large (and on the first page, before any size is known).
LARGE_PAGE = 2
SAMPLES = 5
# Messages handed out between chances for the next page's request to go on.
_LET_AHEAD_RUN = 50


async def iter_messages(
    backend: Backend,
    address: Address,
    *,
    selection: Selection | None = None,
    from_sequence: int = 0,
    limit: int | None = None,
    page_size: int = PAGE,
    on_page: Callable[[int], None] | None = None,
    on_passed: Callable[[Message], None] | None = None,
) -> AsyncIterator[Message]:
    """Browse a queue without locking, page by page in sequence order, yielding matches.

    `on_passed` is called for each message read that the selection passes over.

    Pages are sized from the bodies seen (BatchSizer): at most LARGE_PAGE large bodies are held.
    Over a round trip, while bodies are small, several sequence ranges are read at once
    (operations/ranges.py), so a far broker's round trips overlap each other and the work on
    this page (writing it out, say); a backend that answers at once is read page after page.
    """
    sel = selection or Selection()
    start = max(from_sequence, sel.first_sequence)
    stop = sel.last_sequence
    found = 0
    sizer = BatchSizer(page_size, LARGE_PAGE)

    def wanted(size: int) -> int:
        return size if limit is None else min(size, max(limit - found, MIN_PAGE))

    at_once = backend.answers_at_once
    if at_once:
        pages = _one_after_the_other(backend, address, sizer, start, stop, wanted)
    else:
        from sbdlq.operations.ranges import RangeReader

        pages = RangeReader(backend, address, sizer, start=start, stop=stop, wanted=wanted).pages()
    async with contextlib.aclosing(pages):
        async for page in pages:
            if on_page:
                on_page(len(page))
            for i, m in enumerate(_drain(page), 1):
                if not at_once and i % _LET_AHEAD_RUN == 0:
                    # A reader that never awaits (writing lines out) would hold the requests back.
                    await pause()
                if stop is not None and m.sequence_number > stop:
                    return
                if sel.matches(m):
                    yield m
                    found += 1
                    if limit is not None and found >= limit:
                        return
                elif on_passed is not None:
                    on_passed(m)


async def _one_after_the_other(
    backend: Backend,
    address: Address,
    sizer: BatchSizer,
    start: int,
    stop: int | None,
    wanted: Callable[[int], int],
) -> AsyncGenerator[list[Message], None]:
    """Pages from a backend that answers at once: nothing to overlap, and no event loop needed."""
    while stop is None or start <= stop:
        page = await backend.peek(address, start, wanted(sizer.next_count()))
        if not page:
            return
        sizer.seen(page)
        start = page[-1].sequence_number + 1
        yield page


def _drain(page: list[Message]) -> Iterator[Message]:
    """The page's messages in order, each dropped from the page as it is handed out."""
    page.reverse()
    while page:
        yield page.pop()


async def count_entities(
    backend: Backend, entities: list[EntityPath] | None, *, note: Callable[[str], None] = lambda _: None
) -> list[Counts]:
    """Counts per queue and subscription; with no entities, every one of the namespace (one deleted
    between the listing and its count is left out, with a note: entities come and go)."""
    if entities:
        return [c for e in entities for c in await _counts_of(backend, e)]
    out = []
    for info in await backend.list_entities():
        if info.kind == "topic":
            continue
        try:
            out.append(await backend.counts(_entity_of(info.path)))
        except EntityNotFound:
            note(f"note: {info.path} was deleted while the namespace was counted; left out")
    return out


async def _counts_of(backend: Backend, entity: EntityPath) -> list[Counts]:
    """The entity's counts; a topic's are its subscriptions' (a topic has no DLQ of its own)."""
    try:
        return [await backend.counts(entity)]
    except (BadInput, EntityNotFound):
        # Each backend refuses a topic's counts its own way; only then is it worth asking.
        if entity.is_subscription or (await _kind(backend, entity)) != "topic":
            raise
    prefix = f"{entity.name}/subscriptions/".lower()
    subscriptions = [
        info.path
        for info in await backend.list_entities()
        if info.kind == "subscription" and info.path.lower().startswith(prefix)
    ]
    return [await backend.counts(_entity_of(path)) for path in subscriptions]


async def _kind(backend: Backend, entity: EntityPath) -> str | None:
    try:
        return (await backend.get_entity(entity)).kind
    except EntityNotFound:
        return None


def _entity_of(path: str) -> EntityPath:
    from sbdlq.addresses import parse_entity

    return parse_entity(path)


#: `--by`'s groupings, in the order its completion and refusal list them; a named one takes a
#: name after a colon (`property:NAME`).
GROUPINGS = ("reason", "description", "fingerprint", "source", "subject", "property", "hour", "day", "entity")
NAMED_GROUPINGS = ("property",)
TIME_GROUPINGS = ("hour", "day")


def grouping_words(name: str = "NAME") -> list[str]:
    """`--by`'s values as typed: a named grouping with a colon and `name` after it (`property:NAME`)."""
    return [f"{g}:{name}" if g in NAMED_GROUPINGS else g for g in GROUPINGS]


def _grouping(by: str) -> tuple[str, str]:
    """`--by` as (kind, property name): the kind is case-insensitive, the name is not."""
    kind, sep, name = by.strip().partition(":")
    kind = kind.lower()
    if kind in NAMED_GROUPINGS and sep and name:
        return kind, name
    if kind in GROUPINGS and kind not in NAMED_GROUPINGS and not sep:
        return kind, ""
    words = grouping_words()
    raise BadInput(f"invalid --by {by!r}", hint=f"use {', '.join(words[:-1])} or {words[-1]}")


def group_key(by: str, entity: str = "") -> Callable[[Message], str]:
    """The function giving a message's group under --by (BadInput when --by is unknown).

    `entity` is the queue or subscription the messages come from, the key of `--by entity`.
    """
    kind, name = _grouping(by)
    if kind == "entity":
        return lambda m: entity
    if kind == "reason":
        return lambda m: m.dead_letter_reason or "(none)"
    if kind == "description":
        return lambda m: m.dead_letter_error_description or "(none)"
    if kind == "fingerprint":
        from sbdlq.fingerprint import message_fingerprint

        return lambda m: message_fingerprint(m).id
    if kind == "source":
        return lambda m: m.dead_letter_source or "(none)"
    if kind == "subject":
        return lambda m: m.subject or "(none)"
    if kind == "hour":
        return lambda m: m.enqueued_time.astimezone(UTC).strftime("%Y-%m-%dT%H:00Z")
    if kind == "day":
        return lambda m: m.enqueued_time.astimezone(UTC).strftime("%Y-%m-%d")

    def prop(m: Message) -> str:
        value = m.application_properties.get(name)
        return "(none)" if value is None else str(value)

    return prop


async def inspect_reasons(
    backend: Backend,
    address: Address,
    *,
    by: str = "reason",
    selection: Selection | None = None,
    on_page: Callable[[int], None] | None = None,
    on_passed: Callable[[Message], None] | None = None,
) -> list[ReasonGroup]:
    """Group the queue's messages: count, first and last enqueued, sample sequence numbers."""
    from sbdlq.groups import ReasonGroup

    groups: dict[str, ReasonGroup] = {}
    key = group_key(by, str(address.entity))
    if is_fingerprint_grouping(by):
        found: dict[str, FingerprintGroup] = {}
        await count_fingerprints(found, backend, address, selection=selection, on_page=on_page, on_passed=on_passed)
        return sorted(found.values(), key=lambda g: (-g.count, g.key))
    await count_into(
        groups, ReasonGroup, backend, address, key, selection=selection, on_page=on_page, on_passed=on_passed
    )
    if is_time_grouping(by):
        # Time buckets read best in time order; the rest by size.
        return sorted(groups.values(), key=lambda g: g.key)
    return sorted(groups.values(), key=lambda g: (-g.count, g.key))


async def count_into(
    groups: dict[str, G],
    make: Callable[[str], G],
    backend: Backend,
    address: Address,
    key: Callable[[Message], str],
    *,
    selection: Selection | None = None,
    on_page: Callable[[int], None] | None = None,
    on_passed: Callable[[Message], None] | None = None,
) -> None:
    """Count the queue's messages into `groups`, one per key, new ones made by `make(key)`."""
    async for m in iter_messages(backend, address, selection=selection, on_page=on_page, on_passed=on_passed):
        k = key(m)
        g = groups.get(k)
        if g is None:
            g = groups[k] = make(k)
        add_to_group(g, m)


async def count_fingerprints(
    groups: dict[str, FingerprintGroup],
    backend: Backend,
    address: Address,
    *,
    selection: Selection | None = None,
    on_page: Callable[[int], None] | None = None,
    on_passed: Callable[[Message], None] | None = None,
    entity: str | None = None,
) -> None:
    """Count the queue's messages into `groups` by fingerprint; with `entity`, note it in each group.

    A group holds its counts, span, first samples and (namespace-wide) entity names: memory grows
    with the groups and entities, never with the messages.
    """
    from sbdlq.fingerprint import message_fingerprint
    from sbdlq.groups import FingerprintGroup

    async for m in iter_messages(backend, address, selection=selection, on_page=on_page, on_passed=on_passed):
        fp = message_fingerprint(m)
        g = groups.get(fp.id)
        if g is None:
            g = groups[fp.id] = FingerprintGroup(fp.id, reason=fp.reason, template=fp.template)
            if entity is not None:
                g.entities = set()
                g.sample_entity = entity
        if entity is not None and g.entities is not None:
            g.entities.add(entity)
            if entity != g.sample_entity:
                g.count += 1  # samples come from one entity: a sequence number names a message only there
                _span(g, m)
                continue
        add_to_group(g, m)


def add_to_group(g: ReasonGroup, m: Message) -> None:
    """Count the message in its group: the count, the time span and the first samples."""
    g.count += 1
    _span(g, m)
    if len(g.sample_sequence_numbers) < SAMPLES:
        g.sample_sequence_numbers.append(m.sequence_number)


def _span(g: ReasonGroup, m: Message) -> None:
    g.first_enqueued = _min(g.first_enqueued, m.enqueued_time)
    g.last_enqueued = _max(g.last_enqueued, m.enqueued_time)


def is_fingerprint_grouping(by: str) -> bool:
    """Whether `--by` groups by fingerprint (groups that carry a template and a reason)."""
    return _grouping(by)[0] == "fingerprint"


def is_time_grouping(by: str) -> bool:
    """Whether `--by` buckets messages by time (hour, day)."""
    return _grouping(by)[0] in TIME_GROUPINGS


def _min(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b < a else a


def _max(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b > a else a


def dlq_count(counts: Counts, sub_queue: SubQueue) -> int:
    """The count of the sub-queue a command reads."""
    if sub_queue is SubQueue.TRANSFER_DEAD_LETTER:
        return counts.transfer_dead_letter
    if sub_queue is SubQueue.DEAD_LETTER:
        return counts.dead_letter
    return counts.active


def queue_word(address: Address) -> str:
    """`dead-letter queue` or `transfer dead-letter queue`, for messages to people."""
    return "transfer dead-letter queue" if address.sub_queue is SubQueue.TRANSFER_DEAD_LETTER else "dead-letter queue"


_BUCKET = {"hour": ("%Y-%m-%dT%H:00Z", 3600), "day": ("%Y-%m-%d", 86400)}
MAX_TIMELINE = 24 * 31  # buckets; a longer span is shown as it is, without the gaps filled


def timeline(groups: list[ReasonGroup], by: str) -> list[tuple[str, int]]:
    """Groups by hour or day as a continuous series: quiet hours show as zero, not as nothing."""
    counts = [(g.key, g.count) for g in groups]
    if by not in _BUCKET or not counts:
        return counts
    fmt, step = _BUCKET[by]
    stamps = {datetime.strptime(k, fmt).replace(tzinfo=UTC): n for k, n in counts}
    first, last = min(stamps), max(stamps)
    span = int((last - first).total_seconds() // step) + 1
    if span > MAX_TIMELINE:
        return counts
    return [
        ((first + timedelta(seconds=i * step)).strftime(fmt), stamps.get(first + timedelta(seconds=i * step), 0))
        for i in range(span)
    ]
