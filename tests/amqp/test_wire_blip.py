"""A connection blip mid-resubmit: the Service Bus backend through the real SDK, a proxy that cuts
every connection, and `emulator serve` behind it (issue 24 #5).

Once the receiver's link is gone its locks are gone with it: a copy of a message it held would
leave the original beside it. What was between send and complete at the cut (at most
`--concurrency`) is the only exposure; every other message is moved once, later.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from support import Seeder
from support.proxy import DelayingProxy

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.models import OutboundMessage
from sbdlq.operations.resubmit import resubmit

pytest.importorskip("proton")

N = 400
CONCURRENCY = 8


def _backend(emulator: Any, proxy: DelayingProxy) -> Any:
    from sbdlq.backends.servicebus import ServiceBusBackend

    conn = emulator.conn_str().replace(f":{emulator.port};", f":{proxy.port};")
    return ServiceBusBackend(connection_string=conn, timeout_s=10, admin_port=emulator.http_port)


@pytest.mark.parametrize("cut_after_sends", [2, 5])
def test_a_blip_sends_no_copy_of_what_the_dead_link_held(emulator: Any, cut_after_sends: int) -> None:
    seed = Seeder(emulator.engine)
    # Short locks: what the dead link held is received again within the run once they lapse.
    q, target = emulator.queue(lock_duration_s=3.0), emulator.queue()
    seed.dead_letter(q, [OutboundMessage(body=b"x", message_id=f"m{i}") for i in range(N)], "Blip")

    async def run() -> Any:
        with DelayingProxy(emulator.port) as proxy:
            backend = _backend(emulator, proxy)
            real_send = backend.send
            sends = 0

            async def send(entity: EntityPath, messages: Any) -> None:
                nonlocal sends
                await real_send(entity, messages)
                sends += 1
                if sends == cut_after_sends:
                    # Right after a chunk's copies went out, before its originals are completed:
                    # the receiver holding them (and the next batch) loses its connection.
                    await asyncio.to_thread(proxy.cut)

            backend.send = send
            try:
                return await resubmit(
                    backend,
                    Address(EntityPath(q), SubQueue.DEAD_LETTER),
                    EntityPath(target),
                    batch_size=100,
                    concurrency=CONCURRENCY,
                )
            finally:
                await backend.close()

    result = asyncio.run(run())
    left = Counter(seed.peek_ids(f"{q}/$DeadLetterQueue"))
    copies = Counter(seed.peek_ids(target))
    assert set(left) | set(copies) == {f"m{i}" for i in range(N)}, "a message was lost"
    beside = set(left) & set(copies)
    # The promised bound: what was in flight at the cut, no more.
    assert len(beside) <= CONCURRENCY, (len(beside), result)
    assert sum(copies.values()) == len(copies), "a copy was sent twice"
    # Counted: those beside their copy, and any whose send got no answer (their copy may be there).
    assert len(beside) <= result.left_beside_copy <= CONCURRENCY, result.errors
    counts = ("resubmitted", "failed", "not_tried", "left_beside_copy", "not_received", "unroutable")
    assert sum(getattr(result, k) for k in counts) == result.selected == N
