"""The Service Bus backend's schedule requests: one per run of equal times, cut before the size cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sbdlq.backends.servicebus.scheduling import OVERHEAD_BYTES, REQUEST_BYTES, request_runs
from sbdlq.models import OutboundMessage

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_runs_of_equal_times_share_a_request() -> None:
    messages = [OutboundMessage(b"x")] * 6
    times = [T0, T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=1), T0 + timedelta(seconds=1), T0]
    assert request_runs(messages, times) == [(0, 2), (2, 5), (5, 6)]


def test_a_run_is_cut_before_the_size_cap_and_a_large_message_goes_alone() -> None:
    per = REQUEST_BYTES // 3 - OVERHEAD_BYTES  # three fit, a fourth does not
    messages = [OutboundMessage(b"x" * per)] * 4 + [OutboundMessage(b"x" * REQUEST_BYTES * 2), OutboundMessage(b"x")]
    assert request_runs(messages, [T0] * 6) == [(0, 3), (3, 4), (4, 5), (5, 6)]
    assert request_runs([], []) == []
