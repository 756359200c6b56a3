"""`count -o prometheus` and `count --watch` through the CLI: exact output, exit statuses."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from support import Seeder as Store

from sbdlq.addresses import EntityPath
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.models import Counts


@pytest.fixture
def orders(seed: Store) -> Store:
    """orders: 5 in its DLQ; topic t with s1 (1 dead-lettered, so s2 holds 1 active)."""
    seed.queue("orders")
    seed.topic("t", "s1", "s2")
    seed.dead_letter("orders", 5, prefix="o")
    seed.dead_letter("t/Subscriptions/s1", 1, prefix="s")
    return seed


@pytest.fixture
def ctrl_c_delivered() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt even where SIGINT was inherited as ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_count_prometheus_gauges_for_the_textfile_collector(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("count", "-o", "prometheus")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (
        "# HELP sbdlq_messages Messages in a Service Bus queue or subscription, by sub-queue (sbdlq count).\n"
        "# TYPE sbdlq_messages gauge\n"
        'sbdlq_messages{entity="orders",queue="active"} 0\n'
        'sbdlq_messages{entity="orders",queue="dead_letter"} 5\n'
        'sbdlq_messages{entity="orders",queue="transfer_dead_letter"} 0\n'
        'sbdlq_messages{entity="orders",queue="scheduled"} 0\n'
        'sbdlq_messages{entity="t/Subscriptions/s1",queue="active"} 0\n'
        'sbdlq_messages{entity="t/Subscriptions/s1",queue="dead_letter"} 1\n'
        'sbdlq_messages{entity="t/Subscriptions/s1",queue="transfer_dead_letter"} 0\n'
        'sbdlq_messages{entity="t/Subscriptions/s1",queue="scheduled"} 0\n'
        'sbdlq_messages{entity="t/Subscriptions/s2",queue="active"} 1\n'
        'sbdlq_messages{entity="t/Subscriptions/s2",queue="dead_letter"} 0\n'
        'sbdlq_messages{entity="t/Subscriptions/s2",queue="transfer_dead_letter"} 0\n'
        'sbdlq_messages{entity="t/Subscriptions/s2",queue="scheduled"} 0\n'
    )


def test_prometheus_is_counts_own_and_takes_no_query(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("count", "orders", "-o", "prometheus", "--query", "[0]")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == "sbdlq: --query does not apply to -o prometheus (use -o json with --query)\n"
    r = sbdlq("peek", "orders", "-o", "prometheus")
    assert r.exit_code == 2
    assert r.stderr == "sbdlq: invalid output format 'prometheus' (use table, json, jsonl, yaml, tsv or none)\n"
    # --fail-above still checks, after the gauges are written.
    r = sbdlq("count", "orders", "-o", "prometheus", "--fail-above", "4")
    assert r.exit_code == 3
    assert len(r.stdout.splitlines()) == 6


def _ctrl_c_on_poll(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Ctrl-C during the n-th count call (one entity: one call per snapshot)."""
    real = EmulatorBackend.counts
    calls = 0

    async def counts_then_ctrl_c(self: EmulatorBackend, entity: EntityPath) -> Counts:
        nonlocal calls
        calls += 1
        if calls == n:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(5)  # cancelled here: the snapshot is never shown
        return await real(self, entity)

    monkeypatch.setattr(EmulatorBackend, "counts", counts_then_ctrl_c)


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_watch_jsonl_streams_snapshots_with_their_time_until_ctrl_c(
    orders: Store, sbdlq: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ctrl_c_on_poll(monkeypatch, 3)
    r = sbdlq("count", "orders", "--watch", "1ms", "-o", "jsonl")
    assert (r.exit_code, r.stderr) == (130, "")
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(docs) == 2
    for d in docs:
        assert list(d) == ["time", "entity", "active", "dead_letter", "transfer_dead_letter", "scheduled"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", d["time"])
        assert (d["entity"], d["dead_letter"]) == ("orders", 5)
    assert docs[0]["time"] <= docs[1]["time"]


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_watch_table_off_a_terminal_is_a_stamped_block_per_interval(
    orders: Store, sbdlq: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ctrl_c_on_poll(monkeypatch, 3)
    r = sbdlq("count", "orders", "--watch", "1ms")
    assert (r.exit_code, r.stderr) == (130, "")
    block = (
        "┏━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┓\n"
        "┃ entity ┃ active ┃ dead_letter ┃ transfer_dead_letter ┃ scheduled ┃\n"
        "┡━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━┩\n"
        "│ orders │      0 │           5 │                    0 │         0 │\n"
        "└────────┴────────┴─────────────┴──────────────────────┴───────────┘\n"
    )
    stamp = r"Every 1ms: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n"
    assert re.fullmatch((stamp + re.escape(block)) * 2, r.stdout), r.stdout


def test_watch_with_fail_above_stops_at_the_first_snapshot_over(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("count", "--watch", "1ms", "--fail-above", "4", "-o", "tsv")
    assert r.exit_code == 3
    lines = [line.split("\t")[1:] for line in r.stdout.splitlines()]
    assert lines == [
        ["orders", "0", "5", "0", "0"],
        ["t/Subscriptions/s1", "0", "1", "0", "0"],
        ["t/Subscriptions/s2", "1", "0", "0", "0"],
    ]
    assert r.stderr == "sbdlq: orders: 5 messages in the dead-letter queue, above 4\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--watch", "0"], "sbdlq: --watch must be positive (e.g. --watch 5s)"),
        (["--watch", "soon"], "sbdlq: invalid --watch 'soon' (use e.g. 250ms, 30s, 5m, 2h, 3d or ISO 8601 like PT1M)"),
        (["--watch", "5s", "-o", "json"], "sbdlq: --watch cannot stream -o json (use -o table, jsonl, tsv or none)"),
        (
            ["--watch", "5s", "-o", "prometheus"],
            "sbdlq: --watch cannot stream -o prometheus (use -o table, jsonl, tsv or none)",
        ),
    ],
)
def test_watch_refuses_what_it_cannot_do(orders: Store, sbdlq: Any, args: list[str], line: str) -> None:
    r = sbdlq("count", "orders", *args)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", line + "\n")
