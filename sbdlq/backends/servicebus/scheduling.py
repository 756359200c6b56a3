"""How a schedule of many messages is cut into the SDK's schedule requests.

`ServiceBusSender.schedule_messages` takes one time for all its messages, and sends them in one
management request, which the broker takes only up to its message size (256 KB on Standard):
so one request per run of messages that share a time, cut again before REQUEST_BYTES.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sbdlq.models import OutboundMessage

#: Bodies per schedule request, at most (a message larger than this goes alone).
REQUEST_BYTES = 192 * 1024
#: What a message costs in a request besides its body: properties, annotations, encoding.
OVERHEAD_BYTES = 1024


def request_runs(messages: Sequence[OutboundMessage], times: Sequence[datetime]) -> list[tuple[int, int]]:
    """[start, end) index ranges: equal times each, bodies within REQUEST_BYTES."""
    runs: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, m in enumerate(messages):
        cost = len(m.body) + OVERHEAD_BYTES
        if i > start and (times[i] != times[start] or size + cost > REQUEST_BYTES):
            runs.append((start, i))
            start, size = i, 0
        size += cost
    if start < len(messages):
        runs.append((start, len(messages)))
    return runs
