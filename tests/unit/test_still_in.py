"""settle_recovery.still_in: which of the messages a settlement failed or lost are still in the DLQ."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support import dead_lettered_store

from sbdlq.addresses import Address, parse_address
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.errors import TransientError
from sbdlq.models import Message
from sbdlq.operations import retries, settle_recovery
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.settle_recovery import still_in

DLQ = parse_address("orders/$DeadLetterQueue")


def _peeked(store: Path, n: int) -> list[Message]:
    backend = EmulatorBackend(str(store))
    try:
        return asyncio.run(backend.peek(DLQ, 0, n))
    finally:
        asyncio.run(backend.close())


def _still(backend: EmulatorBackend, messages: list[Message]) -> list[str | None]:
    async def go() -> list[Message]:
        try:
            return await still_in(backend, DLQ, messages, LoopStats())
        finally:
            await backend.close()

    return [m.message_id for m in asyncio.run(go())]


def _complete(store: Path, messages: list[Message]) -> None:
    """Take and complete these messages, as a settlement whose answer was lost would have."""
    backend = EmulatorBackend(str(store))

    async def go() -> None:
        wanted = {m.sequence_number for m in messages}
        got = await backend.receive(DLQ, 1000)
        await backend.complete(DLQ, [m for m in got if m.sequence_number in wanted])
        await backend.abandon(DLQ, [m for m in got if m.sequence_number not in wanted])
        await backend.close()

    asyncio.run(go())


@pytest.mark.parametrize("pick", [range(0, 40), range(0, 40, 13)], ids=["dense", "sparse"])
def test_only_those_still_there_are_returned(tmp_path: Path, pick: range, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settle_recovery, "STILL_IN_PAGE", 4)  # sparse picks take one peek each
    store = dead_lettered_store(tmp_path / "s.db", 40, "Bad")
    all_messages = _peeked(store, 40)
    chosen = [all_messages[i] for i in pick]
    gone = chosen[::2]
    _complete(store, gone)
    assert _still(EmulatorBackend(str(store)), chosen) == [m.message_id for m in chosen[1::2]]


class PeekFails(EmulatorBackend):
    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        raise TransientError("peek: connection reset")


def test_when_the_peek_fails_all_count_as_still_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retries, "RETRY_BASE_S", 0.001)
    store = dead_lettered_store(tmp_path / "s.db", 5, "Bad")
    messages = _peeked(store, 5)
    _complete(store, messages)
    assert _still(PeekFails(str(store)), messages) == [m.message_id for m in messages]
