"""The whole namespace at once through the CLI: inspect-reason with no ENTITY, exact output."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import Clock
from support import Seeder as Store

T0 = 1_735_689_600.0  # 2025-01-01T00:00:00Z


@pytest.fixture
def broker_clock() -> Clock:
    """A fixed clock, so times in the output are known."""
    return Clock(T0)


@pytest.fixture
def namespace(seed: Store) -> Store:
    """orders: 3 Timeout then (an hour later) 1 Poison; t/s1: 2 Poison; t/s2 and idle: empty DLQs."""
    seed.queue("orders")
    seed.queue("idle")
    seed.topic("t", "s1", "s2")
    seed.dead_letter("orders", 3, "Timeout", prefix="o")
    seed.clock.advance(3600)
    seed.dead_letter("orders", 1, "Poison", prefix="p")
    seed.dead_letter("t/Subscriptions/s1", 2, "Poison", prefix="s")
    return seed


def test_inspect_reason_without_entity_groups_every_dlq(namespace: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (
        "                        6 message(s) in 2 dead-letter queue(s) by reason                        \n"
        "┏━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┓\n"
        "┃ entity             ┃ key     ┃ count ┃ first_enqueued       ┃ last_enqueued        ┃ samples ┃\n"
        "┡━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━┩\n"
        "│ orders             │ Timeout │     3 │ 2025-01-01T00:00:00Z │ 2025-01-01T00:00:00Z │ 1, 2, 3 │\n"
        "│ t/Subscriptions/s1 │ Poison  │     2 │ 2025-01-01T01:00:00Z │ 2025-01-01T01:00:00Z │ 1, 2    │\n"
        "│ orders             │ Poison  │     1 │ 2025-01-01T01:00:00Z │ 2025-01-01T01:00:00Z │ 4       │\n"
        "└────────────────────┴─────────┴───────┴──────────────────────┴──────────────────────┴─────────┘\n"
    )


def test_by_entity_table_has_one_entity_column(namespace: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason", "--by", "entity")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (
        "                    6 message(s) in 2 dead-letter queue(s) by entity                     \n"
        "┏━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┓\n"
        "┃ entity             ┃ count ┃ first_enqueued       ┃ last_enqueued        ┃ samples    ┃\n"
        "┡━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━┩\n"
        "│ orders             │     4 │ 2025-01-01T00:00:00Z │ 2025-01-01T01:00:00Z │ 1, 2, 3, 4 │\n"
        "│ t/Subscriptions/s1 │     2 │ 2025-01-01T01:00:00Z │ 2025-01-01T01:00:00Z │ 1, 2       │\n"
        "└────────────────────┴───────┴──────────────────────┴──────────────────────┴────────────┘\n"
    )


def test_namespace_json_has_the_entity_then_the_reasons_shape(namespace: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason", "--reason", "poison", "-o", "json")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == [
        {
            "entity": "t/Subscriptions/s1",
            "key": "Poison",
            "count": 2,
            "first_enqueued": "2025-01-01T01:00:00Z",
            "last_enqueued": "2025-01-01T01:00:00Z",
            "sample_sequence_numbers": [1, 2],
        },
        {
            "entity": "orders",
            "key": "Poison",
            "count": 1,
            "first_enqueued": "2025-01-01T01:00:00Z",
            "last_enqueued": "2025-01-01T01:00:00Z",
            "sample_sequence_numbers": [4],
        },
    ]


def test_namespace_by_hour_is_in_time_order_and_tsv_has_no_header(namespace: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason", "--by", "hour", "-o", "tsv")
    assert r.exit_code == 0
    assert r.stdout == (
        "orders\t2025-01-01T00:00Z\t3\t2025-01-01T00:00:00Z\t2025-01-01T00:00:00Z\t1,2,3\n"
        "orders\t2025-01-01T01:00Z\t1\t2025-01-01T01:00:00Z\t2025-01-01T01:00:00Z\t4\n"
        "t/Subscriptions/s1\t2025-01-01T01:00Z\t2\t2025-01-01T01:00:00Z\t2025-01-01T01:00:00Z\t1,2\n"
    )


def test_one_entity_by_entity_is_one_row(namespace: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason", "orders", "--by", "entity", "-o", "jsonl")
    assert [(d["key"], d["count"]) for d in map(json.loads, r.stdout.splitlines())] == [("orders", 4)]


def test_transfer_dlq_inspect_reason_without_entity(namespace: Store, sbdlq: Any) -> None:
    namespace.transfer_dead_letter("fwd", 2)
    r = sbdlq("transfer-dlq", "inspect-reason", "-o", "jsonl")
    assert r.exit_code == 0
    assert [(d["entity"], d["key"], d["count"]) for d in map(json.loads, r.stdout.splitlines())] == [
        ("fwd", "MessagingEntityNotFound", 2)
    ]


def test_an_empty_namespace_and_a_bad_by(seed: Store, sbdlq: Any) -> None:
    seed.queue("q")
    r = sbdlq("inspect-reason", "-o", "json")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "[]\n", "")
    r = sbdlq("inspect-reason", "--by", "colour")
    assert r.exit_code == 2
    assert r.stderr == (
        "sbdlq: invalid --by 'colour' (use reason, description, fingerprint, source, subject, "
        "property:NAME, hour, day or entity)\n"
    )
