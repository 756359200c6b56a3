"""A store (or broker) that fails mid-resubmit: the bound holds and the summary tells the truth (issue 12 item 6).

The emulator store answers a full disk with `OperationFailed("... disk full")` (sqlite's
SQLITE_FULL, renamed at the edge). The fault is injected at that edge on every call that
writes from some point on, as a full disk does: moving a batch (without locks, or a chunk's
send-and-complete under lock; each one transaction), and receiving the next batch. Both loops
are run: the unlocked one (the default) and the locked one (--rate needs chunks of its own).
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


def _fail_after(monkeypatch: pytest.MonkeyPatch, methods: list[str], good_calls: int) -> None:
    """Calls to `methods` fail once `good_calls` of them went through: the disk is full from then on."""
    calls = {"n": 0}
    for method in methods:
        real: Callable[..., Any] = getattr(Engine, method)

        def flaky(self: Engine, *args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] > good_calls:
                raise OperationFailed(f"emulator store {self.store.path}: disk full")
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Engine, method, flaky)


# The calls that move (each one transaction: a full disk fails it after the copies are
# written), and the good calls before the disk fills: the first move, or the first two receives.
FAILING = {
    "move": (["move_available", "send_and_complete"], 1),
    "receive": (["move_available", "receive"], 2),
}


@pytest.mark.parametrize("concurrency", [8, 32])
@pytest.mark.parametrize("failing", sorted(FAILING))
@pytest.mark.parametrize("loop", [[], ["--rate", "100000"]], ids=["unlocked", "locked"])
def test_full_store_mid_resubmit_keeps_the_bound_and_an_honest_summary(
    seeded: Engine,
    cli: Cli,
    store: Path,
    monkeypatch: pytest.MonkeyPatch,
    concurrency: int,
    failing: str,
    loop: list[str],
) -> None:
    # The seeding engine is done; faults apply to the CLI's engine only.
    _fail_after(monkeypatch, *FAILING[failing])
    argv = ["resubmit", "orders", "--batch-size", "40", "--concurrency", str(concurrency), "--to", "retry", *loop]
    code, out, err = cli(*argv)
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
