"""`spread cancel` when copies fall due between their put and their cancel: named, never lost."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
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
from sbdlq.operations.spread_file import read_spread
from sbdlq.operations.spread_ops import CancelResult, Place, cancel_spread

Q = EntityPath("orders")


class LateCancels(EmulatorBackend):
    """The broker's clock jumps 5 minutes before the first cancel (a slow export, a stalled link)."""

    clock: Clock
    jumped = False

    async def cancel_scheduled(self, entity: EntityPath, sequence_numbers: Sequence[int]) -> None:
        if not self.jumped:
            self.jumped = True
            self.clock.advance(300)
        await super().cancel_scheduled(entity, sequence_numbers)


def test_copies_that_fall_due_before_their_cancel_are_named_and_every_message_is_somewhere_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SBDLQ_STATE_DIR", str(tmp_path / "state"))
    clock = Clock()
    store = tmp_path / "s.db"
    with Engine(store, clock=clock) as engine:
        engine.create_queue("orders", lock_duration_s=300)
        dead_letter_all(engine, "orders", [OutboundMessage(b"x", f"m{i}") for i in range(10)], "Timeout", "t")
    backend = LateCancels(str(store), clock=clock)
    backend.clock = clock
    held = tmp_path / "held.jsonl"

    async def go() -> CancelResult:
        # One copy a minute from 2 minutes ahead: m0..m9 due at +2m .. +11m.
        r = await resubmit(backend, Address(Q, SubQueue.DEAD_LETTER), Q, spread=SpreadOptions("10m", "2m"))
        assert r.spread is not None
        place = Place(backend, held, None)
        try:
            return await cancel_spread(backend, read_spread(r.spread["id"]), place)
        finally:
            place.close()

    result = asyncio.run(go())
    exported = [json.loads(line)["message_id"] for line in held.read_text().splitlines()]
    assert exported == [f"m{i}" for i in range(10)]  # all ten were more than a minute away when read
    # By the cancel, m0..m3 (due at +2m..+5m) had fallen due: active, and in the file too. Named.
    assert len(result.also_active) == 4 and len(result.cancelled) == 6
    active = [m.message_id for m in backend.engine.peek(Address(Q), 0, 100)]
    assert active == ["m0", "m1", "m2", "m3"]
    assert backend.engine.counts(Q).scheduled == 0
