"""Purge over a far wire, again and again: 20 runs in a row, each exact, on every deleting path.

The CLI through the real SDK and a delaying proxy (70 ms round trip) in front of `emulator
serve`. Each run must exit 0, report exactly what was in the DLQ as purged, and leave the DLQ
empty: on the broker's batch delete, on the receive-and-delete fallback (a namespace without
batch delete), and on the peek-lock path (`--export`: written, synced, then completed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import Seeder
from support.proxy import DelayingProxy

pytest.importorskip("proton")

pytestmark = pytest.mark.slow

RUNS = 20
#: more than one batch delete takes (500), more than one receive settles at once (100)
N = 600
RTT_S = 0.07


@pytest.fixture
def far(emulator: Any) -> Iterator[tuple[Any, DelayingProxy]]:
    with DelayingProxy(emulator.port, rtt_s=RTT_S) as proxy:
        yield emulator, proxy


def _purge(cli: Any, emulator: Any, proxy: DelayingProxy, q: str, *extra: str) -> tuple[int, Any, str]:
    conn = emulator.conn_str().replace(f":{emulator.port};", f":{proxy.port};")
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(emulator.http_port)}
    args = ("--connection-string", conn, "--timeout", "30s", "purge", q, "--yes", *extra, "-o", "json")
    code, out, err = cli.bare(*args, env=env)
    return code, json.loads(out) if out.strip() else None, err


def _twenty_runs(far: tuple[Any, DelayingProxy], cli: Any, extra: Any = lambda run: (), n: int = N) -> None:
    emulator, proxy = far
    seed = Seeder(emulator.engine)
    failures: list[str] = []
    for run in range(RUNS):
        q = emulator.queue()
        seed.dead_letter(q, n)
        code, result, err = _purge(cli, emulator, proxy, q, *extra(run))
        got = (code, result and result["selected"], result and result["purged"], seed.counts(q).dead_letter)
        if got != (0, n, n, 0):
            failures.append(f"run {run + 1}: exit, selected, purged, left = {got}; stderr: {err.strip()[-400:]}")
    assert not failures, f"{len(failures)} of {RUNS} runs failed:\n" + "\n".join(failures)


def test_batch_delete_twenty_runs_exact(far: tuple[Any, DelayingProxy], cli: Any) -> None:
    _twenty_runs(far, cli)


def test_receive_and_delete_twenty_runs_exact(
    far: tuple[Any, DelayingProxy], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A namespace without batch delete: the purge falls back to receive-and-delete.
    from sbdlq.emulator.amqp import management

    monkeypatch.delitem(management._OPERATIONS, management.BATCH_DELETE)
    _twenty_runs(far, cli, n=150)  # its time is the second link's attach, whatever the count


def test_export_twenty_runs_exact(far: tuple[Any, DelayingProxy], cli: Any, tmp_path: Path) -> None:
    # --export takes the peek-lock loop: each batch written and synced, then completed.
    # 500 a batch: 500 completes at once used to starve each other in the SDK past the timeout.
    _twenty_runs(far, cli, lambda run: ("--export", str(tmp_path / f"run{run}.jsonl")), n=520)
    for run in range(RUNS):
        assert len((tmp_path / f"run{run}.jsonl").read_text().splitlines()) == 520
