"""Resubmit on the local emulator moves without locks (operations.unlocked), and hands over to
the locked loop where a batch fails: exact counts either way, nothing taken twice or past --max."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import dead_lettered_store, stored_ids

from sbdlq.addresses import EntityPath, parse_address
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.emulator.engine import Engine
from sbdlq.errors import OperationFailed
from sbdlq.operations.resubmit import resubmit
from sbdlq.results import ResubmitResult
from sbdlq.selection import Selection

DLQ = parse_address("orders/$DeadLetterQueue")
N = 10


def _resubmit(store: Path, **options: Any) -> ResubmitResult:
    async def go() -> ResubmitResult:
        backend = EmulatorBackend(str(store))
        try:
            return await resubmit(backend, DLQ, EntityPath("retry"), **options)
        finally:
            await backend.close()

    return asyncio.run(go())


def _count_calls(monkeypatch: pytest.MonkeyPatch, method: str, fail_on: set[int] | None = None) -> list[int]:
    """Counts the engine's calls of `method` (one entry each); the calls numbered in `fail_on` fail."""
    real: Callable[..., Any] = getattr(Engine, method)
    calls: list[int] = []

    def counted(self: Engine, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if fail_on and len(calls) in fail_on:
            raise OperationFailed("emulator store: database is locked")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Engine, method, counted)
    return calls


def test_resubmit_on_the_emulator_takes_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = dead_lettered_store(tmp_path / "s.db", N, "Bad")
    receives = _count_calls(monkeypatch, "receive")
    moves = _count_calls(monkeypatch, "move_available")
    r = _resubmit(store, batch_size=4)
    assert (r.selected, r.resubmitted, r.failed, r.not_matching) == (N, N, 0, 0)
    assert receives == []
    assert len(moves) == 3  # 4 + 4 + 2: the last batch asks only for what is left
    assert stored_ids(store, "retry") == [f"m-{i}" for i in range(N)]
    assert stored_ids(store, str(DLQ)) == []


def test_a_selection_and_max_count_exactly(tmp_path: Path) -> None:
    store = dead_lettered_store(tmp_path / "s.db", N, "Bad")
    wanted = Selection(sequences=[(0, 10**9)], body_contains="x")
    r = _resubmit(store, batch_size=3, max_count=4, selection=wanted)
    assert (r.selected, r.resubmitted, r.failed) == (4, 4, 0)
    assert stored_ids(store, "retry") == [f"m-{i}" for i in range(4)]
    assert stored_ids(store, str(DLQ)) == [f"m-{i}" for i in range(4, N)]


def test_after_a_failed_batch_what_was_passed_over_is_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = dead_lettered_store(tmp_path / "s.db", N, "Bad")
    _count_calls(monkeypatch, "move_available", fail_on={2})
    odd = Selection(sequences=[(seq, seq) for seq in range(1, N + 1, 2)])  # every other message
    r = _resubmit(store, batch_size=4, selection=odd)
    # 2, 4, 6 and 8 passed over, once each; 10 is past the last match, not read as one.
    assert (r.selected, r.resubmitted, r.failed, r.not_matching) == (5, 5, 0, 4)


def test_a_failed_batch_hands_the_rest_to_the_locked_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = dead_lettered_store(tmp_path / "s.db", N, "Bad")
    moves = _count_calls(monkeypatch, "move_available", fail_on={2})
    receives = _count_calls(monkeypatch, "receive")
    r = _resubmit(store, batch_size=2, max_count=7)
    # The first batch moved without a lock; the failed one moved nothing; the locked loop took
    # exactly the 5 left of --max 7, not a message more.
    assert len(moves) == 2 and receives
    assert (r.selected, r.resubmitted, r.failed) == (7, 7, 0)
    assert stored_ids(store, "retry") == [f"m-{i}" for i in range(7)]
    assert stored_ids(store, str(DLQ)) == [f"m-{i}" for i in range(7, N)]


def test_a_message_another_receiver_held_is_taken_once_its_lock_lapses(tmp_path: Path) -> None:
    store = dead_lettered_store(tmp_path / "s.db", 5, "Bad")
    now = [1_000_000.0]
    with Engine(store, clock=lambda: now[0]) as other:
        (held,) = other.receive(DLQ, 1)  # m-0, locked by another receiver for the queue's lock duration

    def progress(total: int | None) -> Callable[[int], None]:
        def tick(done: int) -> None:
            now[0] += 3600  # the other receiver's lock lapses while the first sweep goes by

        return tick

    async def go() -> ResubmitResult:
        backend = EmulatorBackend(str(store), clock=lambda: now[0])
        try:
            return await resubmit(backend, DLQ, EntityPath("retry"), batch_size=10, progress=progress)
        finally:
            await backend.close()

    r = asyncio.run(go())
    assert held.message_id == "m-0"
    assert (r.selected, r.resubmitted, r.failed) == (5, 5, 0)
    assert stored_ids(store, "retry") == ["m-1", "m-2", "m-3", "m-4", "m-0"]
    assert stored_ids(store, str(DLQ)) == []
