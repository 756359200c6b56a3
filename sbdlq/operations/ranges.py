"""Peek pages of several sequence ranges at once, handed out in sequence order, a bounded number held.

A peek from sequence number `lo` answers the first messages at or after `lo`, whatever their
numbers: pages are independent given a from-sequence, so ranges can be read side by side. The
ranges tile the sequence numbers exactly: each new range starts where the one before it is
cut (`hi`, exclusive), and a range is read (from its start, then after its last message)
until a peek answers past its end or short. A message is handed out by the one range its
number falls in, so none twice; a message that stays is inside some range that is read to
its end, so none is skipped, whatever other receivers take meanwhile (a message taken before
its range is read is not shown, as with one page after the other).

Where the numbers are sparse (a DLQ keeps the numbers of the queue it came from), a range's
width is chosen from the density the pages so far showed, to hold about a page; a range that
turns out denser is read in several pages, one sparser costs a peek that answers the next
range's messages, which are dropped (that range reads them itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend
from sbdlq.models import Message
from sbdlq.operations.inflight import Window
from sbdlq.operations.sizing import BATCH_BYTES, LARGE_BODY_BYTES, BatchSizer

#: pages asked for at once at most, so at most this many are held, whatever the DLQ's size
PAGES_HELD = 8


@dataclass
class _Range:
    """One peek in flight: from `lo`, for messages before `hi` (None: no range after it yet)."""

    lo: int
    hi: int | None
    asked: int
    request: asyncio.Future[list[Message]]
    sent_at: float


class RangeReader:
    """Pages of `address` from `start` (to `stop`, inclusive, when given), in order, each cut to its range."""

    def __init__(
        self,
        backend: Backend,
        address: Address,
        sizer: BatchSizer,
        *,
        start: int,
        stop: int | None,
        wanted: Callable[[int], int],
    ) -> None:
        self.backend, self.address, self.sizer = backend, address, sizer
        self.start, self.stop = start, stop
        #: the page size for a request, given the size the sizer allows (the caller's --max)
        self.wanted = wanted
        self.window = Window(PAGES_HELD)
        self.ranges: deque[_Range] = deque()
        #: a peek answered nothing: nothing was at or after its start then, so no range is added
        self.ended = False
        self._read = 0  # messages in full pages so far
        self._span = 0  # the sequence numbers those pages spanned

    async def pages(self) -> AsyncGenerator[list[Message], None]:
        """Each range's messages, in sequence order; the requests still in flight are cancelled at the end."""
        ranges = self.ranges
        try:
            ranges.append(self._ask(self.start, None))
            while ranges:
                head = ranges[0]
                page = await head.request
                ranges.popleft()
                self.window.answered(head.sent_at, len(ranges))
                self.sizer.seen(page)
                rest = self._take(head, page)
                kept = page if head.hi is None else [m for m in page if m.sequence_number < head.hi]
                if self._room() == 1:
                    # Large bodies: one page in memory at a time, the next asked for after this one.
                    if kept:
                        yield kept
                    if rest is not None:
                        ranges.appendleft(self._ask(*rest))
                    continue
                if rest is not None:
                    ranges.appendleft(self._ask(*rest))
                self._more()
                if kept:
                    await asyncio.sleep(0)  # let the requests just made go out before this page is worked on
                    yield kept
        finally:
            for r in ranges:
                r.request.cancel()
            for r in ranges:
                with contextlib.suppress(BaseException):
                    await r.request
            ranges.clear()

    def _take(self, head: _Range, page: list[Message]) -> tuple[int, int | None] | None:
        """Learn from a page (the density of sequence numbers, the end); where its range goes on, from where.

        Only an empty page says nothing is left at or after its start: a broker may answer a
        peek with fewer messages than asked while more follow.
        """
        if not page:
            self.ended = True
            return None
        self._read += len(page)
        self._span += page[-1].sequence_number - page[0].sequence_number + 1
        after = page[-1].sequence_number + 1
        if (head.hi is None or after < head.hi) and (self.stop is None or after <= self.stop):
            return after, head.hi  # not past its end: the rest of this range comes first
        return None

    def _more(self) -> None:
        """New ranges after the last one, while the window has room and bodies are small."""
        ranges = self.ranges
        while not self.ended and ranges and len(ranges) < self._room():
            last = ranges[-1]
            lo = last.lo + self._width()
            if self.stop is not None and lo > self.stop:
                return
            last.hi = lo
            ranges.append(self._ask(lo, None))

    def _room(self) -> int:
        """Ranges in flight at most: the window, fewer while a page's bodies would add up past BATCH_BYTES."""
        estimate = self.sizer.estimate
        if estimate is None or estimate >= LARGE_BODY_BYTES:
            return 1  # large (or unknown) bodies: one page in memory at a time
        per_page = max(1, estimate * self.sizer.next_count())
        return max(1, min(self.window.size, BATCH_BYTES // per_page))

    def _width(self) -> int:
        """Sequence numbers a new range spans: about one page at the density seen so far."""
        count = self.wanted(self.sizer.next_count())
        if not self._read:
            return count
        return max(1, math.ceil(count * self._span / self._read))

    def _ask(self, lo: int, hi: int | None) -> _Range:
        size = self.wanted(self.sizer.next_count())
        if hi is not None:
            size = min(size, hi - lo)  # a range holds at most one message per sequence number
        request = asyncio.ensure_future(self.backend.peek(self.address, lo, size))
        return _Range(lo, hi, size, request, self.window.now())
