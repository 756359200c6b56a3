"""A store (or broker) that fails mid-resubmit: the bound holds and the summary tells the truth (issue 12 item 6).

The emulator store answers a full disk with `OperationFailed("... disk full")` (sqlite's
SQLITE_FULL, renamed at the edge). The fault is injected at that edge, after the first
successful call, on the operation that fails: moving a chunk (the emulator sends its copies and
completes its originals in one transaction), or receiving the next batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import dead_letter_all, stored_ids

from sbdlq.emulator.engine import Engine
from sbdlq.errors import OperationFailed
from sbdlq.models import OutboundMessage
from tests.conftest import Cli

N = 100


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    engine.create_queue("orders")
    engine.create_queue("retry")
    orders = [OutboundMessage(body=b"order %d" % i, message_id=f"m-{i}") for i in range(N)]
    dead_letter_all(engine, "orders", orders, "Bad", "broken")
    return engine


def _fail_after(monkeypatch: pytest.MonkeyPatch, method: str, good_calls: int) -> None:
    real: Callable[..., Any] = getattr(Engine, method)
    calls = {"n": 0}

    def flaky(self: Engine, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > good_calls:
            raise OperationFailed(f"emulator store {self.store.path}: disk full")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Engine, method, flaky)


@pytest.mark.parametrize("concurrency", [8, 32])
# The emulator sends a chunk's copies and completes its originals in one transaction
# (send_and_complete): that is the call a full disk fails after the copies are written.
@pytest.mark.parametrize("failing", ["send_and_complete", "receive"])
def test_full_store_mid_resubmit_keeps_the_bound_and_an_honest_summary(
    seeded: Engine, cli: Cli, store: Path, monkeypatch: pytest.MonkeyPatch, concurrency: int, failing: str
) -> None:
    # The seeding engine is done; faults apply to the CLI's engine only.
    _fail_after(monkeypatch, failing, 1 if failing == "send_and_complete" else 2)
    code, out, err = cli("resubmit", "orders", "--batch-size", "40", "--concurrency", str(concurrency), "--to", "retry")
    monkeypatch.undo()
    assert code == 1, err
    assert "Traceback" not in err
    assert "disk full" in err
    summary = re.search(r"resubmitted (\d+) of (\d+) selected", out)
    assert summary, f"no summary on stdout: {out!r} / {err!r}"
    left, copies = stored_ids(store, "orders/$DeadLetterQueue"), stored_ids(store, "retry")
    assert sorted(set(left) | set(copies)) == sorted(f"m-{i}" for i in range(N)), "a message was lost"
    duplicates = set(left) & set(copies)
    assert len(duplicates) <= concurrency, f"{len(duplicates)} duplicates, bound {concurrency}"
    # One transaction per move: the failed one rolled back whole, so not even the bound is used.
    assert not duplicates
    # "resubmitted" counts only what was both sent and completed.
    assert int(summary.group(1)) == N - len(left)
