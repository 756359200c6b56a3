"""A far namespace: the CLI through the real SDK and a delaying proxy in front of `emulator serve`.

At 70, 150 and 300 ms round trip, resubmit and purge finish the job and count it exactly:
every selected message moved or deleted, the DLQ empty, exit 0. Attaching a link takes about
ten round trips, more than a receive's short wait at these distances.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support import Seeder
from support.proxy import DelayingProxy

pytest.importorskip("proton")

RTTS = [0.07, 0.15, 0.3]
N = 60


@pytest.fixture(params=RTTS, ids=lambda rtt: f"{int(rtt * 1000)}ms")
def far(request: pytest.FixtureRequest, emulator: Any) -> Iterator[tuple[Any, DelayingProxy]]:
    with DelayingProxy(emulator.port, rtt_s=request.param) as proxy:
        yield emulator, proxy


def _run(cli: Any, emulator: Any, proxy: DelayingProxy, *args: str) -> tuple[int, Any, str]:
    conn = emulator.conn_str().replace(f":{emulator.port};", f":{proxy.port};")
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(emulator.http_port)}
    code, out, err = cli.bare("--connection-string", conn, "--timeout", "30s", *args, "-o", "json", env=env)
    return code, json.loads(out) if out.strip() else None, err


def test_resubmit_moves_every_message_once(far: tuple[Any, DelayingProxy], cli: Any) -> None:
    emulator, proxy = far
    seed = Seeder(emulator.engine)
    q = emulator.queue()
    seed.dead_letter(q, N)
    code, result, err = _run(cli, emulator, proxy, "resubmit", q)
    assert code == 0, err
    assert (result["selected"], result["resubmitted"], result["failed"]) == (N, N, 0)
    assert seed.counts(q).dead_letter == 0
    assert sorted(seed.peek_ids(q)) == sorted(f"m{i}" for i in range(N))  # each once


def test_purge_deletes_every_message_and_says_so(far: tuple[Any, DelayingProxy], cli: Any) -> None:
    emulator, proxy = far
    seed = Seeder(emulator.engine)
    q = emulator.queue()
    seed.dead_letter(q, N)
    code, result, err = _run(cli, emulator, proxy, "purge", q, "--yes")
    assert code == 0, err
    assert (result["selected"], result["purged"]) == (N, N)
    assert seed.counts(q).dead_letter == 0


def test_purge_by_receive_and_delete_counts_what_went(
    far: tuple[Any, DelayingProxy], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A namespace without batch delete: receive-and-delete, counted by what left the DLQ.
    from sbdlq.emulator.amqp import management

    monkeypatch.delitem(management._OPERATIONS, management.BATCH_DELETE)
    emulator, proxy = far
    seed = Seeder(emulator.engine)
    q = emulator.queue()
    seed.dead_letter(q, N)
    code, result, err = _run(cli, emulator, proxy, "purge", q, "--yes", "--batch-size", "25")
    assert code == 0, err
    assert (result["selected"], result["purged"]) == (N, N)
    assert seed.counts(q).dead_letter == 0


def test_purge_older_than_deletes_on_the_broker_up_to_the_cutoff(emulator: Any, cli: Any) -> None:
    seed = Seeder(emulator.engine)
    q = emulator.queue()
    emulator.clock.t -= 7200  # these two were enqueued two hours ago
    try:
        seed.dead_letter(q, 2, prefix="old")
    finally:
        emulator.clock.t += 7200
    seed.dead_letter(q, 3, prefix="new")
    with DelayingProxy(emulator.port, rtt_s=0.07) as proxy:
        code, result, err = _run(cli, emulator, proxy, "purge", q, "--yes", "--older-than", "1h")
    assert code == 0, err
    assert (result["selected"], result["purged"]) == (2, 2)
    assert sorted(seed.dlq_ids(q)) == ["new0", "new1", "new2"]


def test_purge_keeps_deletes_in_flight_side_by_side_and_max_exact(emulator: Any, cli: Any) -> None:
    """Premium's 4,000 a request is refused by Standard (serve) once, then 500 a request, several
    at once on receivers of their own; --max deletes exactly that many, the oldest."""
    seed = Seeder(emulator.engine)
    q = emulator.queue()
    seed.dead_letter(q, 1600)
    with DelayingProxy(emulator.port, rtt_s=0.07) as proxy:
        code, result, err = _run(cli, emulator, proxy, "purge", q, "--yes", "--max", "1300", "-v")
    assert code == 0, err
    assert (result["selected"], result["purged"], result["failed"]) == (1300, 1300, 0)
    assert seed.dlq_ids(q) == [f"m{i}" for i in range(1300, 1600)]
    assert "batch delete of 1300 refused: 500 per request" in err
    assert proxy.connections >= 2  # the second and third requests went side by side
