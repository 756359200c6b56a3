"""The watch loop on fake time, and the Prometheus text format of `count -o prometheus`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sbdlq.models import Counts
from sbdlq.operations.watch import every
from sbdlq.output.prometheus import exposition, gauges, label_value


class FakeTime:
    """A monotonic clock that only sleeps and slow polls move."""

    def __init__(self) -> None:
        self.t = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.t += seconds

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.t, UTC)


def test_every_keeps_a_fixed_rate_and_stops_when_told() -> None:
    clock = FakeTime()
    poll_costs = iter([0.5, 2.0, 7.0, 0.0, 0.0])
    shown: list[tuple[float, int]] = []

    async def poll() -> int:
        clock.t += next(poll_costs)  # a poll takes time too
        return len(shown)

    def show(at: datetime, n: int) -> bool:
        shown.append((at.timestamp(), n))
        return len(shown) == 4

    asyncio.run(every(5, poll, show, sleep=clock.sleep, monotonic=clock.monotonic, now=clock.now))
    # Ticks at 100, 105, 110; the 7 s poll overran, so the next starts at once (no catch-up burst).
    assert [t for t, _ in shown] == [100.0, 105.0, 110.0, 117.0]
    assert clock.slept == [4.5, 3.0, 0.0]


def test_gauges_are_one_family_four_series_per_entity_and_a_final_newline() -> None:
    text = exposition(gauges([Counts("orders", 3, 2, 0, 1), Counts("t/Subscriptions/s1", dead_letter=7)]))
    assert text == (
        "# HELP sbdlq_messages Messages in a Service Bus queue or subscription, by sub-queue (sbdlq count).\n"
        "# TYPE sbdlq_messages gauge\n"
        'sbdlq_messages{entity="orders",queue="active"} 3\n'
        'sbdlq_messages{entity="orders",queue="dead_letter"} 2\n'
        'sbdlq_messages{entity="orders",queue="transfer_dead_letter"} 0\n'
        'sbdlq_messages{entity="orders",queue="scheduled"} 1\n'
        'sbdlq_messages{entity="t/Subscriptions/s1",queue="active"} 0\n'
        'sbdlq_messages{entity="t/Subscriptions/s1",queue="dead_letter"} 7\n'
        'sbdlq_messages{entity="t/Subscriptions/s1",queue="transfer_dead_letter"} 0\n'
        'sbdlq_messages{entity="t/Subscriptions/s1",queue="scheduled"} 0\n'
    )


def test_label_values_escape_backslash_quote_and_newline() -> None:
    assert label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert exposition(gauges([])).endswith("gauge\n")
