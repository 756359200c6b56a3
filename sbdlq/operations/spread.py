"""`--spread`: copies scheduled evenly over a window instead of sent now.

Each copy is given its time in sequence order (the k-th of N planned: the window's start plus
k/N of the window, to the whole second, so a namespace takes one schedule request per second
of the window rather than one per copy), scheduled, its sequence number recorded in the
spread file (spread_file.py), and only then is its original completed: the rule of
send-then-complete, with "scheduled and recorded" for "sent".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, OperationFailed, SendUnconfirmed
from sbdlq.models import OutboundMessage
from sbdlq.operations.spread_file import CopyRecord, SpreadWriter, new_spread_id, spread_path
from sbdlq.timeparse import parse_ahead, parse_duration

T = TypeVar("T")

#: The longest window: the broker keeps a scheduled message as long as its entity lives, but a
#: spread is for a consumer's recovery, and a typo (2000h) should not hide copies for months.
MAX_WINDOW_S = 31 * 86400.0


@dataclass(frozen=True, slots=True)
class SpreadOptions:
    """--spread DURATION and --start-at TIME, as given."""

    window: str
    start_at: str | None = None

    def window_s(self) -> float:
        """The window in seconds; BadInput for one that is not a positive duration within a month."""
        seconds = parse_duration(self.window, what="--spread")
        if not 0 < seconds <= MAX_WINDOW_S:
            raise BadInput(f"invalid --spread {self.window!r}: give a duration from 1s to 31d")
        return seconds

    def start(self, now: datetime) -> datetime:
        """When the first copy becomes active: now, or --start-at (a time, or a duration from now)."""
        if self.start_at is None:
            return now
        start = parse_ahead(self.start_at, what="--start-at", now=now)
        if start < now - timedelta(minutes=1):
            raise BadInput(f"--start-at {self.start_at} is in the past", hint="give a later time, or leave it out")
        if start > now + timedelta(seconds=MAX_WINDOW_S):
            raise BadInput(f"--start-at {self.start_at} is more than 31 days ahead")
        return start


def spread_options(window: str | None, start_at: str | None) -> SpreadOptions | None:
    """The options of --spread and --start-at (None: no spread); --start-at alone is refused."""
    if window is None:
        if start_at is not None:
            raise BadInput("--start-at needs --spread: it starts a spread's window")
        return None
    return SpreadOptions(window, start_at)


def check_spread(spread: SpreadOptions | None, rate: float | None) -> None:
    """Refuse a bad --spread or --start-at before anything is read."""
    if spread is None:
        return
    spread.window_s()
    if rate is not None:
        raise BadInput("--spread and --rate contradict each other: --spread paces the copies itself")
    if spread.start_at is not None:
        spread.start(datetime.now(UTC))


@dataclass(slots=True)
class Spreader(Generic[T]):
    """Allots each copy its time, schedules chunks of copies and records what the broker confirmed.

    Items are what the copies are made of: DLQ messages (keyed by sequence number) or a file's
    records (keyed by line).
    """

    backend: Backend
    target: EntityPath
    options: SpreadOptions
    key_of: Callable[[T], int]
    id: str = ""
    start: datetime | None = None
    window_s: float = 0.0
    total: int = 0
    writer: SpreadWriter | None = None
    #: Called with a chunk whose copies were scheduled but whose record could not be written, and
    #: why (resubmit keeps their originals, beside their copy). Default: raise.
    on_unrecorded: Callable[[list[T], str], None] | None = None
    #: an item's key → its copy's time (kept: a retried chunk keeps its times)
    times: dict[int, datetime] = field(default_factory=dict)
    copies: list[CopyRecord] = field(default_factory=list)

    def begin(self, total: int, source: Address | str, target_kind: str) -> None:
        """Fix the window for `total` planned copies and create the spread record."""
        now = self.backend.now()
        self.window_s = self.options.window_s()
        self.start = self.options.start(now).replace(microsecond=0)
        self.total = max(1, total)
        self.id = new_spread_id(now)
        header = {
            "source": str(source),
            "target": str(self.target),
            "target_kind": target_kind,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "window_s": self.window_s,
            "planned": total,
            "backend": self.backend.name,
            "created": datetime.now(UTC).isoformat(),
        }
        self.writer = SpreadWriter(self.id, header)

    @property
    def end(self) -> datetime:
        assert self.start is not None
        return self.start + timedelta(seconds=self.window_s)

    def time_of(self, item: T) -> datetime:
        """The copy's time: the k-th copy allotted gets start + floor(window * k / N) seconds."""
        key = self.key_of(item)
        at = self.times.get(key)
        if at is None:
            assert self.start is not None
            k = min(len(self.times), self.total - 1)
            at = self.start + timedelta(seconds=math.floor(self.window_s * k / self.total))
            self.times[key] = at
        return at

    async def deliver(self, items: list[T], copies: list[OutboundMessage]) -> list[T]:
        """Schedule the copies; record each copy's sequence number (synced) before returning, so
        no original is completed whose copy the record does not hold."""
        times = [self.time_of(m) for m in items]
        try:
            numbers = await self.backend.schedule(self.target, copies, times)
        except SendUnconfirmed as exc:
            # A request got no answer (never repeated: the sender hands those items to the run as
            # unconfirmed): the copies confirmed before it are recorded first, so their originals,
            # counted sent, are completed only with their copy in the record.
            done = exc.sent
            self._record(items[:done], list(exc.sequence_numbers), times[:done], copies[:done])
            raise
        self._record(items, numbers, times, copies)
        return []

    def _record(self, items: list[T], numbers: list[int], times: list[datetime], copies: list[OutboundMessage]) -> None:
        """Record scheduled copies (synced); one the record cannot hold is handed to on_unrecorded."""
        if not items:
            return
        records = [
            CopyRecord(self.key_of(item), n, at, c.message_id)
            for item, n, at, c in zip(items, numbers, times, copies, strict=True)
        ]
        assert self.writer is not None
        try:
            self.writer.record(records)
        except OperationFailed as exc:
            if self.on_unrecorded is None:
                raise
            # Scheduled all the same: never reported as not sent, nor completed unrecorded.
            self.on_unrecorded(items, f"{exc.message}: {len(items)} copies were scheduled but not recorded")
            return
        self.copies += records

    def finish(self, counts: dict[str, Any]) -> None:
        """Close the record with the run's counts."""
        if self.writer is not None:
            self.writer.finish(counts)
            self.writer.close()
            self.writer = None

    def close(self) -> None:
        """Close the record without `finished` (a run that raised): what it holds stays true."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def summary(self) -> dict[str, Any]:
        """The result's `spread` object (DESIGN §4)."""
        assert self.start is not None
        return {
            "id": self.id,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "window_s": self.window_s,
            "scheduled": len(self.copies),
            "file": str(spread_path(self.id)),
            "copies": [c.to_json() for c in self.copies],
        }
