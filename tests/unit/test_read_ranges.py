"""Peek pages read by sequence ranges side by side: in order, none twice, none skipped, a bounded number held."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import pytest

from sbdlq.addresses import parse_address
from sbdlq.models import Message
from sbdlq.operations.browse import iter_messages
from sbdlq.operations.ranges import PAGES_HELD
from sbdlq.selection import Selection

DLQ = parse_address("q/$deadletterqueue")
WHEN = datetime(2024, 1, 1, tzinfo=UTC)


class FarBroker:
    """Peeks after a delay, some answered short (as a broker may), while another receiver takes messages."""

    answers_at_once = False

    def __init__(self, sequences: list[int], *, seed: int, taking: int = 0, short: bool = False) -> None:
        self.held = {n: Message(sequence_number=n, body=b"x", enqueued_time=WHEN) for n in sequences}
        self.rng = random.Random(seed)
        self.taking = taking  # messages another receiver takes at each peek
        self.taken: set[int] = set()
        self.short = short
        self.in_flight = 0
        self.most_in_flight = 0
        self.peeks = 0
        self.answered = 0  # messages the peeks answered, handed out or not

    async def peek(self, address: object, from_sequence: int, max_count: int) -> list[Message]:
        self.peeks += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.rng.uniform(0.0005, 0.004))
            for n in self.rng.sample(sorted(self.held), min(self.taking, len(self.held))):
                del self.held[n]
                self.taken.add(n)
            count = self.rng.randint(1, max_count) if self.short else max_count
            page = [self.held[n] for n in sorted(self.held) if n >= from_sequence][:count]
            self.answered += len(page)
            return page
        finally:
            self.in_flight -= 1


def _read(broker: FarBroker, **kwargs: object) -> list[int]:
    async def go() -> list[int]:
        return [m.sequence_number async for m in iter_messages(broker, DLQ, page_size=50, **kwargs)]  # type: ignore[arg-type]

    return asyncio.run(go())


def _sparse(seed: int) -> list[int]:
    """Bursts and gaps, as a DLQ keeps the numbers of the queue it came from."""
    rng = random.Random(seed)
    out, n = [], 1
    while len(out) < 1500:
        n += rng.choice([1, 1, 1, 2, 7, 300, 5000])
        out.append(n)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_sparse_numbers_read_side_by_side_come_out_once_each_in_order(seed: int) -> None:
    sequences = _sparse(seed)
    broker = FarBroker(sequences, seed=seed, short=seed % 2 == 1)
    assert _read(broker) == sequences
    assert 1 < broker.most_in_flight <= PAGES_HELD


@pytest.mark.parametrize("seed", range(4))
def test_messages_taken_meanwhile_are_never_shown_twice_and_those_that_stay_never_skipped(seed: int) -> None:
    sequences = _sparse(seed)
    broker = FarBroker(sequences, seed=seed, taking=3, short=seed % 2 == 0)
    shown = _read(broker)
    assert shown == sorted(set(shown))  # in order, none twice
    stayed = set(sequences) - broker.taken
    assert stayed <= set(shown)
    assert set(shown) <= set(sequences)


def test_consecutive_numbers_are_each_read_once() -> None:
    """A range asks for no more than it can hold (one message per number): nothing is read twice."""
    broker = FarBroker(list(range(1, 3001)), seed=3)
    assert _read(broker) == list(range(1, 3001))
    assert broker.answered == 3000


def test_a_selection_range_and_a_limit_stop_the_read_and_leave_no_peek_behind() -> None:
    sequences = _sparse(7)
    broker = FarBroker(sequences, seed=7)
    sel = Selection(sequences=[(sequences[100], sequences[900])])
    assert _read(broker, selection=sel) == sequences[100:901]
    assert broker.in_flight == 0
    broker = FarBroker(sequences, seed=8)
    assert _read(broker, limit=333) == sequences[:333]
    assert broker.in_flight == 0
