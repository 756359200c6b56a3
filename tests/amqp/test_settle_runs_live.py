"""The Service Bus backend settling in runs against `emulator serve`, through the unmodified SDK:
a run the broker never answers turns runs off for the rest of the backend's life, and nothing is lost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("proton")

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.servicebus import ServiceBusBackend, sdk_compat
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.settle_recovery import still_in


def test_an_unanswered_run_turns_runs_off_and_settles_one_by_one(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = emulator.queue()
    emulator.seed(q, *"abcdef")
    address = Address(EntityPath(q))
    runs: list[int] = []

    async def unanswered(receiver: Any, sdk_messages: list[Any], verb: str) -> None:
        runs.append(len(sdk_messages))
        raise TimeoutError("no settlement outcome came back")  # as a broker that ignores ranges

    monkeypatch.setattr(sdk_compat, "settle_run", unanswered)

    async def scenario() -> tuple[list[Any], list[Any]]:
        backend = ServiceBusBackend(connection_string=emulator.conn_str(), timeout_s=10, admin_port=emulator.http_port)
        try:
            got: list[Any] = []
            while len(got) < 6:
                got += await backend.receive(address, 6 - len(got), max_wait_s=2)
            # The run goes unanswered: its messages are completed one by one at once.
            lost = await backend.complete(address, got[:3])
            # And no run is tried again on this backend.
            return lost, await backend.complete(address, got[3:])
        finally:
            await backend.close()

    lost, lost_again = asyncio.run(scenario())
    assert runs == [3]
    assert lost == lost_again == []
    assert emulator.engine.peek(address, 0, 10) == []


def test_a_run_refused_for_a_lost_lock_keeps_runs_on(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    q = emulator.queue()
    emulator.seed(q, *"abcdefgh")
    address = Address(EntityPath(q))
    real = sdk_compat.settle_run
    runs: list[int] = []

    async def counted(receiver: Any, sdk_messages: list[Any], verb: str) -> None:
        runs.append(len(sdk_messages))
        await real(receiver, sdk_messages, verb)

    monkeypatch.setattr(sdk_compat, "settle_run", counted)

    async def scenario() -> tuple[str | None, list[str | None]]:
        backend = ServiceBusBackend(connection_string=emulator.conn_str(), timeout_s=10, admin_port=emulator.http_port)
        try:
            got: list[Any] = []
            while len(got) < 8:
                got += await backend.receive(address, 8 - len(got), max_wait_s=2)
            emulator.engine.abandon(address, [got[1].lock_token])  # its lock ends elsewhere
            lost = await backend.complete(address, got[:4])
            left = await still_in(backend, address, lost, LoopStats())
            assert await backend.complete(address, got[4:]) == []  # still a run: the broker answers them
            return got[1].message_id, [m.message_id for m in left]
        finally:
            await backend.close()

    abandoned, left = asyncio.run(scenario())
    assert runs == [4, 4]
    assert [m.message_id for m in emulator.engine.peek(address, 0, 10)] == left == [abandoned]
