"""Browsing asks for the next page while the current one is worked on: a far round trip overlaps the writing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from sbdlq.addresses import parse_address
from sbdlq.models import Message
from sbdlq.operations.browse import iter_messages

DLQ = parse_address("q/$deadletterqueue")


class Pages:
    """A backend whose peek answers from n messages after a delay, recording what happened when."""

    answers_at_once = False

    def __init__(self, n: int, body: bytes = b"x") -> None:
        when = datetime(2024, 1, 1, tzinfo=UTC)
        self.messages = [Message(sequence_number=i, body=body, enqueued_time=when) for i in range(1, n + 1)]
        self.events: list[str] = []
        self.cancelled = 0

    async def peek(self, address: object, from_sequence: int, max_count: int) -> list[Message]:
        self.events.append(f"peek {from_sequence}")
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return [m for m in self.messages if m.sequence_number >= from_sequence][:max_count]


def _written(backend: Pages, drive: Callable[[Coroutine[Any, Any, None]], object]) -> list[str]:
    """Browse every page with `drive` (asyncio.run, or no loop at all), writing each message out."""

    async def read_all() -> None:
        async for m in iter_messages(backend, DLQ, page_size=10):  # type: ignore[arg-type]
            backend.events.append(f"write {m.sequence_number}")

    drive(read_all())
    return [e for e in backend.events if e.startswith("write")]


def test_the_next_page_is_asked_for_before_this_one_is_written() -> None:
    backend = Pages(30)
    assert _written(backend, asyncio.run) == [f"write {i}" for i in range(1, 31)]  # every message once, in order
    # The first page (2 messages, before sizes are known) is written after the second page was asked for.
    assert backend.events.index("peek 3") < backend.events.index("write 1")
    assert backend.events.index("peek 13") < backend.events.index("write 3")


def test_a_reader_that_stops_early_leaves_no_peek_behind() -> None:
    backend = Pages(100)

    async def go() -> list[int]:
        out = []
        async for m in iter_messages(backend, DLQ, page_size=10):  # type: ignore[arg-type]
            out.append(m.sequence_number)
            if len(out) == 5:
                break
        return out

    assert asyncio.run(go()) == [1, 2, 3, 4, 5]
    assert backend.cancelled == 1


def test_large_bodies_are_not_read_ahead() -> None:
    backend = Pages(6, body=b"x" * (2 * 1024 * 1024))

    async def go() -> None:
        async for m in iter_messages(backend, DLQ):  # type: ignore[arg-type]
            backend.events.append(f"write {m.sequence_number}")

    asyncio.run(go())
    # One page (of two large bodies) in memory at a time: each peek after the page before was written.
    assert backend.events.index("peek 3") > backend.events.index("write 2")


class NearPages(Pages):
    """The in-process emulator's case: answers at once, nothing to ask ahead for."""

    answers_at_once = True

    async def peek(self, address: object, from_sequence: int, max_count: int) -> list[Message]:
        self.events.append(f"peek {from_sequence}")
        return [m for m in self.messages if m.sequence_number >= from_sequence][:max_count]


def test_a_backend_that_answers_at_once_is_read_page_after_page_without_an_event_loop() -> None:
    from sbdlq.loopless import run_without_loop

    backend = NearPages(30)
    assert _written(backend, run_without_loop) == [f"write {i}" for i in range(1, 31)]
    # No page is asked for before the one before it is written out.
    assert backend.events.index("peek 3") > backend.events.index("write 2")
