"""Purge's batch deletes, several in flight (a far namespace): --max exact, a lost answer counted, the cutoff kept."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import pytest
from support import Clock, Seeder

from sbdlq.addresses import Address, parse_address
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.errors import TransientError
from sbdlq.operations.inflight import Window
from sbdlq.operations.purge import purge
from sbdlq.selection import build_selection

DLQ = parse_address("q/$deadletterqueue")


class Watched(EmulatorBackend):
    """The store behind a short round trip (a namespace's batch delete), watching what is in flight."""

    def __init__(self, path: str) -> None:
        super().__init__(path, latency_s=0.002, clock=Clock())
        self.in_flight = 0
        self.most_in_flight = 0
        self.asked_in_flight = 0  # messages the requests in flight may take
        self.most_asked_past: list[int] = []  # asked in flight plus deleted, at each request
        self.lose_answer_of: int | None = None  # the request (1-based) whose answer is lost
        self.requests = 0

    async def delete_messages(self, address: Address, max_count: int, *, before: datetime | None = None) -> int | None:
        self.requests += 1
        number = self.requests
        self.in_flight += 1
        self.asked_in_flight += max_count
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.most_asked_past.append(self.asked_in_flight + self.deleted)
        try:
            gone = await super().delete_messages(address, max_count, before=before)
        finally:
            self.in_flight -= 1
            self.asked_in_flight -= max_count
        self.deleted += gone or 0
        if number == self.lose_answer_of:
            raise TransientError("batch delete: operation timed out")  # done on the broker all the same
        return gone

    deleted = 0


@pytest.fixture
def store(tmp_path: Path) -> tuple[Watched, Seeder]:
    backend = Watched(str(tmp_path / "store.db"))
    seed = Seeder(backend.engine)
    seed.queue("q")
    return backend, seed


def test_deletes_overlap_and_never_ask_past_max(store: tuple[Watched, Seeder]) -> None:
    backend, seed = store
    seed.dead_letter("q", 3000)
    r = asyncio.run(purge(backend, DLQ, max_count=2222, concurrency=8))
    assert (r.selected, r.purged, r.failed) == (2222, 2222, 0)
    # The oldest went, each once; the newest 778 are there.
    assert seed.dlq_ids("q") == [f"m{i}" for i in range(2222, 3000)]
    assert backend.most_in_flight >= 2
    # What was deleted plus what the requests in flight may take never passed --max.
    assert max(backend.most_asked_past) <= 2222


def test_a_lost_answer_among_several_in_flight_is_counted_not_repeated(store: tuple[Watched, Seeder]) -> None:
    backend, seed = store
    seed.dead_letter("q", 2600)
    backend.lose_answer_of = 3  # one of the first two sent side by side
    r = asyncio.run(purge(backend, DLQ, max_count=2100, concurrency=8))
    assert (r.purged, r.failed) == (2100, 0)
    assert r.retries >= 1
    assert seed.dlq_ids("q") == [f"m{i}" for i in range(2100, 2600)]
    assert max(backend.most_asked_past) <= 2100


def test_older_than_with_several_in_flight_spares_every_newer_message(store: tuple[Watched, Seeder]) -> None:
    backend, seed = store
    seed.clock.t -= 7200
    seed.dead_letter("q", 1800, prefix="old")
    seed.clock.t += 7200
    seed.dead_letter("q", 40, prefix="new")
    selection = build_selection(older_than="1h", now=seed.clock.at())
    r = asyncio.run(purge(backend, DLQ, selection=selection, concurrency=8))
    assert r.purged == 1800
    assert seed.dlq_ids("q") == [f"new{i}" for i in range(40)]
    assert backend.most_in_flight >= 2


def test_the_window_covers_the_round_trip_and_stays_under_the_cap() -> None:
    """A far link (100 ms) to a broker that takes 10 ms a request: about 11 in flight, never past the cap."""
    t = [0.0]
    window = Window(32, clock=lambda: t[0])
    t[0] = 0.11
    window.answered(0.0, 0)  # the first, alone: round trip 110 ms
    assert window.size == 2
    sent = [0.11, 0.11]
    t[0] = 0.22
    window.answered(sent.pop(), 1)
    t[0] = 0.23  # the broker did the second 10 ms after the first
    window.answered(sent.pop(), 0)
    assert window.size == 4  # at most doubles at each answer
    for _ in range(6):
        t[0] += 0.01
        window.answered(t[0] - 0.11, 3)
    assert window.size == 12  # 110 ms / 10 ms, plus one
    capped = Window(3, clock=lambda: t[0])
    capped.answered(t[0] - 1, 1)
    for _ in range(5):
        t[0] += 0.001
        capped.answered(t[0] - 1, 2)
    assert capped.size == 3
