"""Answers that stop while the requests still reach the broker (issue 34 #2): through the real SDK,
a proxy in front of `emulator serve` holds back every answer from the moment a chunk's complete
goes out.

The broker completes those originals; their complete gets no answer, and neither does the peek
that would tell. Before the report says originals stayed beside their copy, the run looks again
(one peek by sequence number): what is gone was resubmitted after all; when that look fails
too, the report says the state is unknown instead of that they stayed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from support import Seeder
from support.faulty_proxy import FaultyProxy

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.models import OutboundMessage
from sbdlq.operations.resubmit import resubmit

pytest.importorskip("proton")

N = 64
CONCURRENCY = 8
TIMEOUT_S = 2.0


def _run(emulator: Any, q: str, target: str, *, stall_at_complete: int, release_at_peek: int | None) -> Any:
    """Resubmit through the proxy; the answers stop when the given complete goes out, and come back
    when the given peek after it is asked (None: after the run)."""
    from sbdlq.backends.servicebus import ServiceBusBackend

    async def run() -> Any:
        with FaultyProxy(emulator.port, rtt_s=0.02) as proxy:
            conn = emulator.conn_str().replace(f":{emulator.port};", f":{proxy.port};")
            backend = ServiceBusBackend(connection_string=conn, timeout_s=TIMEOUT_S, admin_port=emulator.http_port)
            real_complete, real_peek = backend.complete, backend.peek
            completes = 0
            peeks: int | None = None  # peeks since the answers stopped

            async def complete(address: Address, messages: Any) -> Any:
                nonlocal completes, peeks
                completes += 1
                if completes == stall_at_complete:
                    await asyncio.to_thread(proxy.stall)
                    peeks = 0
                return await real_complete(address, messages)

            async def peek(address: Address, from_sequence: int, max_count: int) -> Any:
                nonlocal peeks
                if peeks is not None:
                    peeks += 1
                    if peeks == release_at_peek:
                        proxy.release()
                return await real_peek(address, from_sequence, max_count)

            backend.complete = complete  # type: ignore[method-assign]
            backend.peek = peek  # type: ignore[method-assign]
            try:
                return await resubmit(
                    backend,
                    Address(EntityPath(q), SubQueue.DEAD_LETTER),
                    EntityPath(target),
                    batch_size=32,
                    concurrency=CONCURRENCY,
                )
            finally:
                proxy.release()
                await backend.close()

    return asyncio.run(run())


def _seed(emulator: Any) -> tuple[Seeder, str, str]:
    seed = Seeder(emulator.engine)
    q, target = emulator.queue(lock_duration_s=5.0), emulator.queue()
    seed.dead_letter(q, [OutboundMessage(body=b"x", message_id=f"m{i}") for i in range(N)], "Stall")
    return seed, q, target


@pytest.mark.parametrize("at", [1, 3])
def test_originals_completed_without_an_answer_are_not_reported_as_left(emulator: Any, at: int) -> None:
    seed, q, target = _seed(emulator)
    # The complete and the peek after it go unanswered; the answers come back for the next peek.
    result = _run(emulator, q, target, stall_at_complete=at, release_at_peek=2)
    left = {m.sequence_number for m in seed.dlq(q)}
    copies = Counter(seed.peek_ids(target))
    assert max(copies.values()) == 1
    assert len(left) == result.selected - result.resubmitted, (result, left)
    assert result.resubmitted <= sum(copies.values()) <= result.resubmitted + result.left_beside_copy
    assert set(result.left_sequences) <= left, (result.left_sequences, left)
    assert result.left_beside_copy <= CONCURRENCY
    assert result.unchecked_reason is None
    line = result.left_over()
    assert line is not None and "may have stayed" not in line
    # No line of the run's says more stayed than the look found.
    assert not any("stayed" in e for e in result.errors) or result.left_beside_copy, result.errors


def test_originals_that_could_not_be_checked_are_reported_as_unknown(emulator: Any) -> None:
    _, q, target = _seed(emulator)
    # Held back until the run has ended: neither the complete nor any look at the DLQ is answered.
    result = _run(emulator, q, target, stall_at_complete=2, release_at_peek=None)
    line = result.left_over()
    assert result.unchecked_reason is not None
    assert line is not None and "may have stayed" in line and "state is unknown" in line, line
    assert "original(s) stayed in the queue" not in line
    doc = result.to_json()
    assert doc["left_unchecked"] == result.left_beside_copy - doc["left_unconfirmed"] > 0, doc
