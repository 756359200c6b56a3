"""Done-when of issue 40: 10,000 copies spread over 10 minutes become active evenly.

The emulator's clock is moved minute by minute (nothing waits): each minute releases a
tenth of the copies, within 10%, and until its time each copy counts as scheduled.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support import Clock
from support.seeding import dead_letter_all

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage
from sbdlq.operations.resubmit import resubmit
from sbdlq.operations.spread import SpreadOptions

N = 10_000


def test_ten_thousand_copies_over_ten_minutes_become_active_a_tenth_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SBDLQ_STATE_DIR", str(tmp_path / "state"))
    clock = Clock()
    store = tmp_path / "s.db"
    with Engine(store, clock=clock) as engine:
        engine.create_queue("orders", lock_duration_s=300)
        batch = [OutboundMessage(body=b"x", message_id=f"m-{i}") for i in range(N)]
        for i in range(0, N, 2000):
            dead_letter_all(engine, "orders", batch[i : i + 2000], "Timeout", "t")
    backend = EmulatorBackend(str(store), clock=clock)
    q = EntityPath("orders")

    async def go() -> None:
        result = await resubmit(backend, Address(q, SubQueue.DEAD_LETTER), q, spread=SpreadOptions("10m"))
        assert (result.resubmitted, result.left_beside_copy, result.failed) == (N, 0, 0)

    asyncio.run(go())
    engine = backend.engine
    counts = engine.counts(q)
    assert counts.dead_letter == 0 and counts.active + counts.scheduled == N
    assert counts.scheduled >= N - N // 500  # at the start only its first second is due
    clock.advance(-0.001)  # each minute measured up to, not including, its end
    active = []
    for _ in range(10):
        clock.advance(60)
        active.append(engine.counts(q).active)
    shares = [b - a for a, b in zip([0, *active], active, strict=False)]
    assert sum(shares) == N and engine.counts(q).scheduled == 0
    for share in shares:
        assert abs(share - N / 10) <= N / 100, shares  # within 10% of a tenth
