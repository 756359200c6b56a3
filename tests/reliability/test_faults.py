"""A flaky broker: seeded transient errors, timeouts, lost responses and lost locks.

Resubmit and purge must retry with bounded backoff, account for every message, report
retries, and exit 0 when all succeeded or 1 with an exact summary otherwise.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from support import Cli, dead_lettered_store, stored_ids

from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.errors import TransientError
from sbdlq.models import Counts, EntityInfo, Message, OutboundMessage
from sbdlq.operations import move
from sbdlq.operations.purge import purge
from sbdlq.operations.resubmit import resubmit
from sbdlq.paths import Address, EntityPath, SubQueue

N = 200
DLQ = Address(EntityPath("orders"), SubQueue.DEAD_LETTER)


class FlakyBackend(Backend):
    """Wraps a backend; a seeded fraction of calls fail before or after doing their work."""

    name = "flaky"

    def __init__(self, inner: Backend, *, rate: float, seed: int, lose_locks: float = 0.0) -> None:
        self.inner = inner
        self.rate = rate
        self.lose_locks = lose_locks
        self.rng = random.Random(seed)
        self.faults: Counter[str] = Counter()

    async def _call(self, name: str, coro_fn: Any) -> Any:
        roll = self.rng.random()
        if roll < self.rate / 3:
            self.faults[f"{name}:before"] += 1
            raise TransientError(f"{name}: server busy")
        if roll < 2 * self.rate / 3:
            self.faults[f"{name}:timeout"] += 1
            await asyncio.sleep(0)  # the call yields, as a timed-out one would, then fails
            raise TransientError(f"{name}: operation timed out")
        result = await coro_fn()
        if roll < self.rate and name in ("send", "complete", "abandon"):
            # The work was done but the answer was lost: the caller will retry.
            self.faults[f"{name}:after"] += 1
            raise TransientError(f"{name}: connection reset")
        return result

    async def list_entities(self) -> list[EntityInfo]:
        return await self.inner.list_entities()

    async def get_entity(self, entity: EntityPath) -> EntityInfo:
        return await self.inner.get_entity(entity)

    async def counts(self, entity: EntityPath) -> Counts:
        return await self.inner.counts(entity)

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        return await self._call("peek", lambda: self.inner.peek(address, from_sequence, max_count))  # type: ignore[no-any-return]

    async def _receive(self, address: Address, max_count: int, mode: ReceiveMode, max_wait_s: float) -> list[Message]:
        return await self._call(  # type: ignore[no-any-return]
            "receive", lambda: self.inner.receive(address, max_count, mode=mode, max_wait_s=max_wait_s)
        )

    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        lost = [m for m in messages if self.rng.random() < self.lose_locks]
        if lost:
            self.faults["complete:lock-lost"] += len(lost)
        keep = [m for m in messages if m not in lost]
        done = await self._call("complete", lambda: self.inner.complete(address, keep))
        return [*done, *lost]

    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        return await self._call("abandon", lambda: self.inner.abandon(address, messages))  # type: ignore[no-any-return]

    async def dead_letter(
        self, address: Address, messages: Sequence[Message], reason: str, description: str
    ) -> list[Message]:
        return await self.inner.dead_letter(address, messages, reason, description)

    async def renew_locks(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        return await self._call("renew", lambda: self.inner.renew_locks(address, messages))  # type: ignore[no-any-return]

    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        await self._call("send", lambda: self.inner.send(entity, messages))

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(move, "RETRY_BASE_S", 0.001)
    monkeypatch.setattr(move, "RETRY_CAP_S", 0.005)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """N messages `m-<i>` in the DLQ of `orders`; an empty `retry`."""
    return dead_lettered_store(tmp_path / "store.db", N, "Flaky")


def _ids(store: Path, path: str) -> list[str]:
    # Look past any lock the run may have left behind.
    return stored_ids(store, path, clock=lambda: 10**10)


@pytest.mark.parametrize("seed", range(6))
def test_resubmit_through_faults_accounts_for_every_message(store: Path, seed: int) -> None:
    retries = 0
    runs = 0
    lost_answers = 0
    while _ids(store, "orders/$DeadLetterQueue") and runs < 10:
        # Locks left by failed settlements lapse between runs, as they would on the broker.
        flaky = FlakyBackend(
            EmulatorBackend(str(store), clock=lambda r=runs: 10**9 + r * 3600), rate=0.25, seed=seed * 100 + runs
        )
        before = len(_ids(store, "orders/$DeadLetterQueue"))
        result = asyncio.run(resubmit(flaky, DLQ, EntityPath("retry"), batch_size=17, concurrency=8))
        retries += result.retries
        lost_answers += flaky.faults["send:after"]
        assert result.resubmitted + result.failed <= result.selected
        # Exact: what left the DLQ, whatever a retried complete's answer said.
        assert result.resubmitted == before - len(_ids(store, "orders/$DeadLetterQueue"))
        runs += 1
    assert _ids(store, "orders/$DeadLetterQueue") == []
    moved = Counter(_ids(store, "retry"))
    assert set(moved) == {f"m-{i}" for i in range(N)}
    assert retries > 0
    # A duplicate only where a send's answer was lost after the broker took it: at most one
    # chunk, never more than --concurrency (8 here), per lost answer.
    assert sum(moved.values()) - N <= 8 * lost_answers


@pytest.mark.parametrize("seed", range(4))
def test_purge_export_through_faults_loses_nothing(store: Path, tmp_path: Path, seed: int) -> None:
    export = tmp_path / "out.jsonl"
    runs = 0
    while _ids(store, "orders/$DeadLetterQueue") and runs < 10:
        flaky = FlakyBackend(
            EmulatorBackend(str(store), clock=lambda r=runs: 10**9 + r * 3600), rate=0.25, seed=seed * 100 + runs
        )
        before = len(_ids(store, "orders/$DeadLetterQueue"))
        result = asyncio.run(purge(flaky, DLQ, export=export, batch_size=13))
        # Exact: a complete whose answer was lost deleted its messages all the same.
        assert result.purged == before - len(_ids(store, "orders/$DeadLetterQueue"))
        runs += 1
    assert _ids(store, "orders/$DeadLetterQueue") == []
    exported = {json.loads(line)["message_id"] for line in export.read_text().splitlines()}
    assert exported == {f"m-{i}" for i in range(N)}


def test_lost_locks_exit_1_with_exact_summary(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Locks lost after the copy was sent: the originals stay in the DLQ, the run says so and exits 1."""
    import sbdlq.backends as backends

    real = backends.open_backend

    def flaky_open(target: Any, **kw: Any) -> Backend:
        return FlakyBackend(real(target, **kw), rate=0.0, seed=7, lose_locks=0.1)

    monkeypatch.setattr(backends, "open_backend", flaky_open)
    cli = Cli(store, tmp_path)
    result = cli.invoke("resubmit", "orders", "--to", "retry", "-o", "json", env={"SBDLQ_EMULATOR": str(store)})
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    left = len(_ids(store, "orders/$DeadLetterQueue"))
    assert 0 < left < N
    # Resubmitted means sent and completed (issue 12 item 6): the left-over originals are not counted.
    assert doc["resubmitted"] == N - left
    assert doc["failed"] == 0
    assert f"{left} original(s) stayed in the queue after their copy was sent" in result.stderr
    assert "Traceback" not in result.stderr
