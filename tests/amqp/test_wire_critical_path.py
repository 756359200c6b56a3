"""The round trips on a far resubmit's critical path (issue 35): two per chunk, its send and its complete.

Far from the broker a resubmit of N at --concurrency C cannot take less than N / C × 2 round
trips (Little's law: each message counts from the start of its send until its complete is
confirmed). That holds only if nothing else waits on the path: the next batch is received
while the chunks of this one are sent and completed. Counted, not timed: through the real SDK
and a delaying proxy, every receive, send and complete the loop makes is recorded as events in
order, and the longest chain of calls each begun after the one before it ended is the number of
sequential round trips. A loop that waited for a receive before each chunk would make three
per chunk.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from support import Seeder
from support.proxy import DelayingProxy

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.operations.resubmit import resubmit

pytest.importorskip("proton")

CONCURRENCY = 20
BATCH = 16  # fewer than a chunk, as the benchmark's 100 against 128: a chunk needs more than one receive
CHUNKS = 8
RTT_S = 0.3  # the wire, not the machine, sets how long each call takes
#: calls on the path outside the chunks: the first receives before a chunk is full, the last empty one
OUTSIDE_CHUNKS = 4

Call = tuple[str, int, int]  # name, the event number of its start, of its end


def _longest_chain(calls: list[Call]) -> int:
    """The most calls one after the other: each begun after the one before it ended."""
    depth: dict[int, int] = {}
    ordered = sorted(range(len(calls)), key=lambda i: calls[i][2])
    for i in ordered:
        _, start, _ = calls[i]
        before = [depth[j] for j in depth if calls[j][2] < start]
        depth[i] = 1 + max(before, default=0)
    return max(depth.values(), default=0)


def _resubmit_recorded(emulator: Any, q: str) -> tuple[Any, list[Call]]:
    """Resubmit through the proxy, every receive, send and complete recorded in event order."""
    from sbdlq.backends.servicebus import ServiceBusBackend

    calls: list[Call] = []
    events = itertools.count()

    async def run() -> Any:
        with DelayingProxy(emulator.port, rtt_s=RTT_S) as proxy:
            conn = emulator.conn_str().replace(f":{emulator.port};", f":{proxy.port};")
            backend = ServiceBusBackend(connection_string=conn, timeout_s=60, admin_port=emulator.http_port)
            for name in ("receive", "send", "complete"):
                real = getattr(backend, name)

                async def recorded(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
                    start = next(events)
                    try:
                        return await _real(*args, **kwargs)
                    finally:
                        calls.append((_name, start, next(events)))

                setattr(backend, name, recorded)
            try:
                return await resubmit(
                    backend,
                    Address(EntityPath(q), SubQueue.DEAD_LETTER),
                    EntityPath(q),
                    batch_size=BATCH,
                    concurrency=CONCURRENCY,
                )
            finally:
                await backend.close()

    return asyncio.run(run()), calls


def test_a_far_resubmit_waits_two_round_trips_a_chunk(emulator: Any) -> None:
    seed = Seeder(emulator.engine)
    q = emulator.queue(lock_duration_s=60.0)
    n = CONCURRENCY * CHUNKS
    seed.dead_letter(q, n)
    result, calls = _resubmit_recorded(emulator, q)
    assert (result.selected, result.done, result.failed) == (n, n, 0), result.errors
    assert seed.counts(q).dead_letter == 0
    assert sorted(seed.peek_ids(q)) == sorted(f"m{i}" for i in range(n))  # each once
    sends = [c for c in calls if c[0] == "send"]
    completes = [c for c in calls if c[0] == "complete"]
    assert len(sends) == len(completes) == CHUNKS  # one send and one complete a chunk, full chunks
    chain = _longest_chain(calls)
    # The chunks' sends and completes one after the other, the receives beside them.
    assert chain <= 2 * CHUNKS + OUTSIDE_CHUNKS, f"{chain} sequential calls for {CHUNKS} chunks"


def test_the_chain_counts_a_receive_waited_for() -> None:
    # receive, then send, then complete, three times over: nine one after the other.
    calls: list[Call] = []
    at = 0
    for _ in range(3):
        for name in ("receive", "send", "complete"):
            calls.append((name, at, at + 1))
            at += 2
    assert _longest_chain(calls) == 9
    # The next receive begun while this chunk is sent: the receives are beside the chain.
    overlapped: list[Call] = [("receive", 0, 1)]
    for k in range(3):
        s = 2 + 4 * k
        overlapped += [("send", s, s + 1), ("receive", s, s + 3), ("complete", s + 2, s + 3)]
    assert _longest_chain(overlapped) == 7
