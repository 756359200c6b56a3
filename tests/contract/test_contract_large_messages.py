"""Large messages on every backend: receives and peeks ask for at most --concurrency (peek:
LARGE_PAGE) of them whatever the batch size, and bodies arrive whole (the Service Bus backend
through the unmodified SDK and `emulator serve`, whose links take the entity's maximum size)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.seeding import Seeder
from support.spy import Spy

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import ReceiveMode
from sbdlq.models import Message, OutboundMessage
from sbdlq.operations.browse import LARGE_PAGE, iter_messages
from sbdlq.operations.purge import purge
from sbdlq.operations.resubmit import resubmit

BODY = 2 * 1024 * 1024
N = 6
DLQ = Address(EntityPath("big"), SubQueue.DEAD_LETTER)


class SizeSpy(Spy):
    """Records how many messages each receive and peek brought back."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.batches: list[int] = []

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        got = await super().peek(address, from_sequence, max_count)
        self.batches.append(len(got))
        return got

    async def receive(
        self, address: Address, max_count: int, *, mode: ReceiveMode = ReceiveMode.PEEK_LOCK, max_wait_s: float = 1.0
    ) -> list[Message]:
        got = await super().receive(address, max_count, mode=mode, max_wait_s=max_wait_s)
        self.batches.append(len(got))
        return got


def _seed(seed: Seeder) -> list[bytes]:
    bodies = [f"large {i} ".encode().ljust(BODY, b"x") for i in range(N)]
    for name in ("big", "retry"):
        seed.queue(name, max_message_size_kb=4 * 1024)
    seed.dead_letter("big", [OutboundMessage(body=b, message_id=f"m-{i}") for i, b in enumerate(bodies)])
    return bodies


def test_peek_pages_of_large_messages_hold_a_few(spy: Spy, seed: Seeder, aio: Any) -> None:
    bodies = _seed(seed)
    sizes = SizeSpy(spy.inner)

    async def bodies_peeked() -> list[bytes]:
        return [m.body async for m in iter_messages(sizes, DLQ)]

    assert aio(bodies_peeked()) == bodies
    assert max(sizes.batches) <= LARGE_PAGE


def test_resubmit_of_large_messages_receives_at_most_concurrency(spy: Spy, seed: Seeder, aio: Any) -> None:
    bodies = _seed(seed)
    sizes = SizeSpy(spy.inner)
    r = aio(resubmit(sizes, DLQ, EntityPath("retry"), batch_size=100, concurrency=2))
    assert (r.selected, r.done, r.failed) == (N, N, 0), r.errors
    assert max(sizes.batches) <= 2
    moved = seed.engine.peek(Address(EntityPath("retry")), 0, 2 * N)
    assert sorted(m.body for m in moved) == sorted(bodies)


def test_purge_export_of_large_messages_receives_at_most_concurrency(
    spy: Spy, seed: Seeder, aio: Any, tmp_path: Path
) -> None:
    bodies = _seed(seed)
    sizes = SizeSpy(spy.inner)
    export = tmp_path / "export.jsonl"
    r = aio(purge(sizes, DLQ, export=export, batch_size=100, concurrency=2))
    assert (r.selected, r.done) == (N, N)
    assert max(sizes.batches) <= 2
    assert [json.loads(line)["body"].encode() for line in export.read_text().splitlines()] == bodies
