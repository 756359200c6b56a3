"""Done-when of issue 40 through `emulator serve` and the unmodified SDK: a spread's copies are
scheduled with `schedule_messages`, become active a tenth a minute (10,000 of them; the listener's clock moved,
nothing waits), and a cancel halfway (`cancel_scheduled_messages`) leaves every message once:
active, still scheduled, or in the export file."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.seeding import dead_letter_all
from support.serve import Emulator, finish, start

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.models import OutboundMessage
from sbdlq.operations.resubmit import resubmit
from sbdlq.operations.spread import SpreadOptions
from sbdlq.operations.spread_file import read_spread
from sbdlq.operations.spread_ops import CancelResult, Place, cancel_spread

pytestmark = pytest.mark.slow

N = 10_000
Q = EntityPath("orders")


def _at(emu: Emulator, when: float) -> None:
    """Move the listener's clock (wall plus skew) so that it reads `when` now."""
    emu.clock.t = when - time.time()


def test_a_spread_through_the_sdk_becomes_active_evenly_and_cancels_halfway_losing_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("proton")
    from sbdlq.backends.servicebus import ServiceBusBackend

    monkeypatch.setenv("SBDLQ_STATE_DIR", str(tmp_path / "state"))
    emu = start(tmp_path / "emulator.db")
    try:
        emu.engine.create_queue("orders", lock_duration_s=300)
        messages = [OutboundMessage(body=b"x", message_id=f"m-{i}") for i in range(N)]
        dead_letter_all(emu.engine, "orders", messages, "Timeout", "t")
        held = tmp_path / "held.jsonl"

        async def spread_then_cancel() -> tuple[dict[str, Any], list[int], CancelResult]:
            backend = ServiceBusBackend(connection_string=emu.conn_str(), timeout_s=120, admin_port=emu.http_port)
            # The client's clock agrees with the broker's, as it does in Azure: here the listener's
            # is moved, so the backend reads it (the cancel's margin is counted from it).
            monkeypatch.setattr(backend, "now", lambda: datetime.fromtimestamp(emu.clock(), UTC))
            try:
                r = await resubmit(backend, Address(Q, SubQueue.DEAD_LETTER), Q, spread=SpreadOptions("10m"))
                assert (r.resubmitted, r.left_beside_copy, r.failed) == (N, 0, 0), r.to_json() | {"errors": r.errors}
                assert r.spread is not None
                start_s = datetime.fromisoformat(str(r.spread["start"])).timestamp()
                active = []
                for minute in range(1, 6):  # the first half of the window
                    # Counted with the clock standing a millisecond before the minute: the copies
                    # due at the minute itself are not counted, however slow the count.
                    emu.clock.frozen = start_s + 60 * minute - 0.001
                    try:
                        active.append(emu.engine.counts(Q).active)
                    finally:
                        emu.clock.frozen = None
                _at(emu, start_s + 60 * 5 - 0.001)
                # Halfway: cancel what is still scheduled, each copy exported first.
                place = Place(backend, held, None)
                try:
                    done = await cancel_spread(backend, read_spread(str(r.spread["id"])), place)
                finally:
                    place.close()
                return r.spread, active, done
            finally:
                await backend.close()

        spread, active, done = asyncio.run(spread_then_cancel())
        shares = [b - a for a, b in zip([0, *active], active, strict=False)]
        for share in shares:
            assert abs(share - N / 10) <= N / 100, shares  # a tenth a minute, within 10%
        exported = [json.loads(line)["message_id"] for line in held.read_text().splitlines()]
        assert len(exported) == len(done.cancelled) > N // 3
        in_queue = [m.message_id for m in emu.engine.peek(Address(Q), 0, 2 * N)]
        seen = Counter([*in_queue, *exported])
        assert set(seen) == {f"m-{i}" for i in range(N)} and max(seen.values()) == 1  # none missing, none twice
        assert emu.engine.counts(Q).dead_letter == 0 and spread["scheduled"] == N
    finally:
        finish(emu)
