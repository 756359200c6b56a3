"""Lock renewal on the Service Bus backend against `emulator serve`, through the unmodified SDK,
when a settlement overtakes it (issue 24 #6).

A message completed while its renewal waits makes the SDK raise "already settled" for it: that
must cost only that message, not the renewal of the others (their locks lapsed and their
originals stayed beside their copies: 120 of 1,000 on a slow link with 5 s locks).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("proton")

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.servicebus import ServiceBusBackend

CONCURRENCY = 16
#: short, as in the report (5 s there, at 600 ms): several renewals per message on this link
LOCK_S = 3.0


@pytest.mark.parametrize("shortcuts", ["on", "off"])
def test_a_message_completed_during_its_renewal_costs_only_itself(emulator: Any, shortcuts: str) -> None:
    q = emulator.queue()
    emulator.seed(q, *"abcd")
    address = Address(EntityPath(q))

    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        backend = ServiceBusBackend(
            connection_string=emulator.conn_str(), timeout_s=10, sdk_shortcuts=shortcuts, admin_port=emulator.http_port
        )
        try:
            got: list[Any] = []
            while len(got) < 4:
                got += await backend.receive(address, 4 - len(got), max_wait_s=2)
            before = [m.locked_until for m in got]
            link = next(iter(backend._receivers.values()))
            # The renewal has chosen its messages and waits for the link (a peek, another renewal)
            # while the first message is completed: it renews a token the broker no longer has.
            async with link.lock:
                renewing = asyncio.create_task(backend.renew_locks(address, got))
                await asyncio.sleep(0.05)
                assert await backend.complete(address, got[:1]) == []
            lost = await renewing
            still = await backend.still_held(address, got)
            return lost, [m.locked_until for m in got[1:]] + before[1:], still
        finally:
            await backend.close()

    lost, untils, still = asyncio.run(scenario())
    # No error, and no lock reported lost: the completed one was settled (not renewed, and nobody
    # acts on it again); the others were renewed.
    assert lost == []
    renewed, before = untils[:3], untils[3:]
    assert all(after is not None and (b is None or after >= b) for after, b in zip(renewed, before, strict=True))
    assert [m.body for m in still] == [b"b", b"c", b"d"]


def test_a_slow_link_with_short_locks_leaves_no_original_beside_its_copy(emulator: Any) -> None:
    """300 ms round trips and short locks: renewals overlap completes all the time (issue 24 #6)."""
    from collections import Counter

    from support import Seeder
    from support.proxy import DelayingProxy

    from sbdlq.addresses import SubQueue
    from sbdlq.models import OutboundMessage
    from sbdlq.operations.resubmit import resubmit

    n = 240
    seed = Seeder(emulator.engine)
    q, target = emulator.queue(lock_duration_s=LOCK_S), emulator.queue()
    seed.dead_letter(q, [OutboundMessage(body=b"x", message_id=f"m{i}") for i in range(n)], "Slow")

    async def run() -> Any:
        with DelayingProxy(emulator.port, rtt_s=0.3) as proxy:
            conn = emulator.conn_str().replace(f":{emulator.port};", f":{proxy.port};")
            backend = ServiceBusBackend(connection_string=conn, timeout_s=10, admin_port=emulator.http_port)
            try:
                return await resubmit(
                    backend, Address(EntityPath(q), SubQueue.DEAD_LETTER), EntityPath(target), concurrency=CONCURRENCY
                )
            finally:
                await backend.close()

    result = asyncio.run(run())
    left = Counter(seed.peek_ids(f"{q}/$DeadLetterQueue"))
    copies = Counter(seed.peek_ids(target))
    assert set(left) | set(copies) == {f"m{i}" for i in range(n)}
    # A renewal overtaken by a complete no longer fails the others' renewal ...
    assert not [e for e in result.errors if "renewal" in e], result.errors
    # ... so no lock lapses for it. (A lock can still lapse on a machine too busy to renew in
    # time: that costs at most the chunk in flight, never a message sent twice.)
    assert len(set(left) & set(copies)) <= CONCURRENCY, result.errors
    assert sum(copies.values()) == len(copies), "a copy was sent twice"
