"""`sbdlq spread status` and `sbdlq spread cancel`: a spread's copies read back from the broker.

The copies a record names are found with peeks by sequence number (from the next one still
wanted, so other messages of the queue are skipped in pages). A cancel puts each copy still
scheduled somewhere first (an export file, written and synced, or another entity, sent), then
cancels it, then appends the numbers to the record: a kill between two steps leaves a copy in
both places, never in neither. Copies due within CANCEL_MARGIN_S are left to become active:
one could fall due between its put and its cancel and then be in two places.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from sbdlq.addresses import Address, EntityPath, parse_entity, send_target
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, MessageNotFound
from sbdlq.models import Message, OutboundMessage
from sbdlq.operations.export import Exporter, check_export_target
from sbdlq.operations.resubmit import COPIED_FIELDS
from sbdlq.operations.spread_file import SpreadDoc, append_to
from sbdlq.operations.stopping import RunInterrupted, Stopper, run_stoppable

#: Copies peeked, put and cancelled at a time.
CANCEL_BATCH = 100
#: Copies due sooner than this are not cancelled (they would race their own release).
CANCEL_MARGIN_S = 60.0
_PEEK_PAGE = 250


@dataclass(slots=True)
class SpreadStatus:
    """Where a spread's copies are now."""

    id: str
    target: str
    start: datetime
    end: datetime
    recorded: int
    scheduled: int = 0
    became_active: int = 0
    cancelled: int = 0
    next_release: datetime | None = None
    finished: bool = False
    #: False for a topic: its scheduled messages cannot be peeked, so the record's times are shown
    checked: bool = True

    #: The keys of `to_json` that `spread status`'s table leaves out; it shows the others, in
    #: order (an unchecked topic gets a note on stderr instead).
    NOT_IN_TABLE: ClassVar[frozenset[str]] = frozenset({"finished", "checked"})

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "target": self.target,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "recorded": self.recorded,
            "scheduled": self.scheduled,
            "became_active": self.became_active,
            "cancelled": self.cancelled,
            "next_release": None if self.next_release is None else self.next_release.isoformat(),
            "finished": self.finished,
            "checked": self.checked,
        }


def _target(doc: SpreadDoc) -> EntityPath:
    return parse_entity(doc.target)


def _is_topic(doc: SpreadDoc) -> bool:
    return doc.header.get("target_kind") == "topic"


async def scheduled_copies(backend: Backend, doc: SpreadDoc, numbers: list[int]) -> AsyncIterator[Message]:
    """The copies among `numbers` still scheduled on the spread's queue, in sequence order."""
    want = set(numbers)
    wanted = sorted(want)
    address = Address(_target(doc))
    i = 0
    while i < len(wanted):
        page = await backend.peek(address, wanted[i], _PEEK_PAGE)
        if not page:
            return
        last = page[-1].sequence_number
        for m in page:
            if m.sequence_number in want and m.state == "scheduled":
                yield m
        while i < len(wanted) and wanted[i] <= last:
            i += 1


async def spread_status(backend: Backend, doc: SpreadDoc) -> SpreadStatus:
    """How many copies are still scheduled, became active, were cancelled; the next release."""
    status = SpreadStatus(doc.id, doc.target, doc.start, doc.end, len(doc.copies), finished=doc.finished is not None)
    live = [c for c in doc.copies if c.copy not in doc.cancelled]
    status.cancelled = len(doc.copies) - len(live)
    if _is_topic(doc):
        status.checked = False
        now = backend.now()
        pending = [c.at for c in live if c.at > now]
    else:
        at = {c.copy: c.at for c in live}
        pending = [at[m.sequence_number] async for m in scheduled_copies(backend, doc, list(at))]
    status.scheduled = len(pending)
    status.became_active = len(live) - len(pending)
    status.next_release = min(pending, default=None)
    return status


@dataclass(slots=True)
class CancelResult:
    """What `spread cancel` did, copy by copy."""

    id: str
    place: str
    cancelled: list[int] = field(default_factory=list)
    #: copies left because they fall due within the margin (they become active)
    left_due: list[int] = field(default_factory=list)
    #: copies no longer scheduled when looked for (active already, or cancelled before)
    not_scheduled: int = 0
    #: copies put in the place whose cancel came too late: active too (a duplicate, named here)
    also_active: list[int] = field(default_factory=list)
    #: copies not looked at: a signal stopped the run (still scheduled, or active by now)
    not_reached: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "to": self.place,
            "cancelled": len(self.cancelled),
            "cancelled_sequences": self.cancelled,
            "left_due": len(self.left_due),
            "not_scheduled": self.not_scheduled,
            "also_active": self.also_active,
            "not_reached": self.not_reached,
        }

    def summary(self) -> str:
        text = f"cancelled {len(self.cancelled)} scheduled copies of spread {self.id}, each first put {self.place}"
        extras = []
        if self.left_due:
            extras.append(f"{len(self.left_due)} due within {CANCEL_MARGIN_S:.0f}s left to become active")
        if self.not_scheduled:
            extras.append(f"{self.not_scheduled} no longer scheduled")
        if self.not_reached:
            extras.append(f"{self.not_reached} not reached: stopped")
        return text + (f" ({', '.join(extras)})" if extras else "")


def outbound_of(m: Message) -> OutboundMessage:
    """A scheduled copy as it is, to send elsewhere (no schedule: it goes now)."""
    fields = {name: getattr(m, name) for name in COPIED_FIELDS}
    return OutboundMessage(**fields, application_properties=dict(m.application_properties))


class Place:
    """Where `cancel` puts each copy before it cancels it."""

    def __init__(self, backend: Backend, export: Path | None, to: str | None) -> None:
        if (export is None) == (to is None):
            raise BadInput("spread cancel needs a place for the copies: --export FILE or --to ENTITY (one)")
        self.backend = backend
        self.export = export
        if export is not None:
            check_export_target(export, follow_symlinks=False)  # refused now; made at the first copy
        self.exporter: Exporter | None = None
        self.to = None if to is None else send_target(to)
        self.name = f"in {export}" if export is not None else f"to {self.to}"

    async def put(self, copies: list[Message]) -> None:
        """Written and synced, or sent: raises when they are not safely there."""
        if self.export is not None:
            if self.exporter is None:
                self.exporter = Exporter(self.export)
            self.exporter.write(copies)
        else:
            assert self.to is not None
            await self.backend.send(self.to, [outbound_of(m) for m in copies])

    def close(self) -> None:
        if self.exporter is not None:
            self.exporter.close()


async def cancel_spread(
    backend: Backend, doc: SpreadDoc, place: Place, *, tick: Callable[[int], None] | None = None
) -> CancelResult:
    """Put each copy still scheduled in the place, then cancel it, batch by batch; record it.

    SIGINT or SIGTERM lets the batch in flight finish, then raises RunInterrupted with what was done.
    """
    if _is_topic(doc):
        raise BadInput(
            f"spread {doc.id} scheduled its copies on topic {doc.target}: a topic's scheduled messages "
            "cannot be read back, so cancelling them would lose them",
            hint="let them become active",
        )
    if place.to is not None and str(place.to).lower() == doc.target.lower():
        raise BadInput(f"--to {place.to} is the spread's own target: the copies would be sent twice")
    result = CancelResult(doc.id, place.name)
    stops: list[str] = []
    stopper = Stopper(stops.append)

    async def work(s: Stopper) -> CancelResult:
        s.moving = True  # from the first peek: a signal ends the run between batches, never inside one
        await _cancel_all(backend, doc, place, result, tick, stops)
        return result

    await run_stoppable(work, stopper, lambda: result)
    if stopper.signum is not None:
        raise RunInterrupted(result, stopper.signum)
    return result


async def _cancel_all(
    backend: Backend,
    doc: SpreadDoc,
    place: Place,
    result: CancelResult,
    tick: Callable[[int], None] | None,
    stops: list[str],
) -> None:
    """Batches of copies still scheduled and more than the margin away, until done or stopped."""
    target = _target(doc)
    numbers = [c.copy for c in doc.copies if c.copy not in doc.cancelled]
    batch: list[Message] = []
    seen = 0
    horizon = backend.now() + timedelta(seconds=CANCEL_MARGIN_S)
    async for m in scheduled_copies(backend, doc, numbers):
        if stops:
            break
        seen += 1
        due = m.scheduled_enqueue_time
        if due is None or due <= horizon:
            result.left_due.append(m.sequence_number)
            continue
        batch.append(m)
        if len(batch) >= CANCEL_BATCH:
            await _cancel_batch(backend, target, doc, place, batch, result)
            if tick:
                tick(len(batch))
            batch = []
            horizon = backend.now() + timedelta(seconds=CANCEL_MARGIN_S)
    if batch:
        await _cancel_batch(backend, target, doc, place, batch, result)
        if tick:
            tick(len(batch))
    if stops:
        result.not_reached = len(numbers) - seen
    else:
        result.not_scheduled = len(numbers) - seen


async def _cancel_batch(
    backend: Backend, target: EntityPath, doc: SpreadDoc, place: Place, batch: list[Message], result: CancelResult
) -> None:
    """Put, then cancel, then record. A batch the broker refuses because one of it fell due
    (MessageNotFound: then none was cancelled) is cancelled one by one: each that fell due is
    active now and also in the place, and is named."""
    await place.put(batch)
    numbers = [m.sequence_number for m in batch]
    try:
        await backend.cancel_scheduled(target, numbers)
        done = numbers
    except MessageNotFound:
        done = []
        for n in numbers:
            try:
                await backend.cancel_scheduled(target, [n])
                done.append(n)
            except MessageNotFound:
                result.also_active.append(n)
    append_to(doc.id, [{"cancelled": done, "to": place.name}])
    result.cancelled += done
