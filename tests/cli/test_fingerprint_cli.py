"""`inspect-reason --by fingerprint` and `--fingerprint` through the CLI: groups, JSON, refusals, selection."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import Clock
from support import Seeder as Store

from sbdlq.fingerprint import fingerprint

T0 = 1_735_689_600.0  # 2025-01-01T00:00:00Z

ORDER = fingerprint("OrderNotFound", "Order 1 not found in store eu-west-1")
CUSTOMER = fingerprint("OrderNotFound", "Customer 1 not found in store eu-west-1")
TIMEOUT = fingerprint("HttpTimeout", "Timeout after 1ms calling https://pay.example.com/v2/charge/ch_1")


@pytest.fixture
def broker_clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def orders(seed: Store) -> Store:
    """orders: 3 orders not found (sequence 1, 3, 5), 2 customers not found (2, 4), 1 timeout (6) an hour later."""
    seed.queue("orders")
    for i, (kind, n) in enumerate([("Order", 48213), ("Customer", 7), ("Order", 9), ("Customer", 31), ("Order", 5)]):
        store = ["eu-west-1", "us-east-2", "ap-south-1"][i % 3]
        seed.dead_letter(
            "orders", 1, "OrderNotFound", f"Order {n} not found in store {store}".replace("Order", kind), prefix=f"n{i}"
        )
    seed.clock.advance(3600)
    seed.dead_letter(
        "orders",
        1,
        "HttpTimeout",
        "Timeout after 30000ms calling https://pay.example.com/v2/charge/ch_8f7a91c2",
        prefix="t",
    )
    return seed


def test_the_table_shows_one_row_per_fingerprint(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason", "orders", "--by", "fingerprint")
    assert (r.exit_code, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    assert "6 message(s) in 3 fingerprint(s)" in lines[0]
    body = [line for line in lines if line.startswith("│")]
    assert [line.split("│")[1].strip() for line in body] == [ORDER.id, CUSTOMER.id, TIMEOUT.id]
    assert "Order <num> not found in store <id>" in r.stdout
    assert "│     3 │" in body[0] and "1, 3, 5" in body[0]


def test_json_has_one_object_per_group_with_its_template(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason", "orders", "--by", "fingerprint", "-o", "json")
    assert (r.exit_code, r.stderr) == (0, "")
    assert json.loads(r.stdout) == [
        {
            "key": ORDER.id,
            "fingerprint": ORDER.id,
            "reason": "OrderNotFound",
            "template": "Order <num> not found in store <id>",
            "count": 3,
            "first_enqueued": "2025-01-01T00:00:00Z",
            "last_enqueued": "2025-01-01T00:00:00Z",
            "sample_sequence_numbers": [1, 3, 5],
        },
        {
            "key": CUSTOMER.id,
            "fingerprint": CUSTOMER.id,
            "reason": "OrderNotFound",
            "template": "Customer <num> not found in store <id>",
            "count": 2,
            "first_enqueued": "2025-01-01T00:00:00Z",
            "last_enqueued": "2025-01-01T00:00:00Z",
            "sample_sequence_numbers": [2, 4],
        },
        {
            "key": TIMEOUT.id,
            "fingerprint": TIMEOUT.id,
            "reason": "HttpTimeout",
            "template": "Timeout after <duration> calling https://pay.example.com/<*>/charge/<*>",
            "count": 1,
            "first_enqueued": "2025-01-01T01:00:00Z",
            "last_enqueued": "2025-01-01T01:00:00Z",
            "sample_sequence_numbers": [6],
        },
    ]


@pytest.mark.parametrize("entity", [["orders"], []])
def test_prometheus_is_refused_in_one_line(orders: Store, sbdlq: Any, entity: list[str]) -> None:
    r = sbdlq("inspect-reason", *entity, "--by", "fingerprint", "-o", "prometheus")
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr.splitlines()[0].startswith("sbdlq: inspect-reason offers no -o prometheus: its groups")
    assert "unbounded" in r.stderr and "Traceback" not in r.stderr


def test_namespace_wide_groups_span_entities_with_an_entity_count(orders: Store, sbdlq: Any) -> None:
    orders.queue("billing")
    orders.dead_letter("billing", 1, "OrderNotFound", "Order 77 not found in store eu-north-1", prefix="b")
    r = sbdlq("inspect-reason", "--by", "fingerprint", "-o", "json")
    assert (r.exit_code, r.stderr) == (0, "")
    doc = json.loads(r.stdout)
    assert [(g["fingerprint"], g["count"], g["entities"]) for g in doc] == [
        (ORDER.id, 4, 2),
        (CUSTOMER.id, 2, 1),
        (TIMEOUT.id, 1, 1),
    ]
    # the samples are of one entity, named: a sequence number names a message only there
    assert (doc[0]["sample_entity"], doc[0]["sample_sequence_numbers"]) == ("billing", [1])
    table = sbdlq("inspect-reason", "--by", "fingerprint")
    assert table.exit_code == 0
    assert "7 message(s) in 2 dead-letter queue(s) by fingerprint" in table.stdout
    assert "entities" in table.stdout


# ---------------------------------------------------------------------- --fingerprint in every command

ORDERS = ["n00", "n20", "n40"]  # the three "Order N not found" messages
CUSTOMERS = ["n10", "n30"]


def dlq_ids(seed: Store, entity: str = "orders") -> list[str]:
    return sorted(m.message_id or "" for m in seed.dlq(entity))


def test_peek_takes_exactly_the_group(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("peek", "orders", "--fingerprint", ORDER.id, "-o", "json")
    assert (r.exit_code, r.stderr) == (0, "")
    assert [m["message_id"] for m in json.loads(r.stdout)] == ORDERS
    # repeatable (any one), a prefix of 4, either case
    r = sbdlq("peek", "orders", "--fingerprint", TIMEOUT.id, "--fingerprint", CUSTOMER.id[:4].upper(), "-o", "json")
    assert [m["message_id"] for m in json.loads(r.stdout)] == ["n10", "n30", "t0"]


@pytest.mark.parametrize("bad", ["3fa", "zzzz1", "0123456789"])
def test_a_bad_fingerprint_is_one_line_and_exit_2(orders: Store, sbdlq: Any, bad: str) -> None:
    before = dlq_ids(orders)
    r = sbdlq("purge", "orders", "--fingerprint", bad, "--yes")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr.startswith(f"sbdlq: invalid --fingerprint {bad!r}")
    assert dlq_ids(orders) == before


def test_resubmit_moves_exactly_the_group(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("resubmit", "orders", "--fingerprint", CUSTOMER.id, "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["resubmitted"]) == (0, 2)
    assert sorted(m.message_id or "" for m in orders.active("orders")) == CUSTOMERS
    assert dlq_ids(orders) == [*ORDERS, "t0"]


def test_purge_deletes_exactly_the_group(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("purge", "orders", "--fingerprint", ORDER.id, "--yes", "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["purged"]) == (0, 3)
    assert dlq_ids(orders) == [*CUSTOMERS, "t0"]


def test_replay_sends_exactly_the_group(orders: Store, sbdlq: Any, tmp_path: Any) -> None:
    export = tmp_path / "dlq.jsonl"
    assert sbdlq("purge", "orders", "--yes", "--export", str(export)).exit_code == 0
    orders.queue("retry")
    r = sbdlq("replay", str(export), "--to", "retry", "--fingerprint", ORDER.id, "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["replayed"]) == (0, 3)
    assert sorted(m.message_id or "" for m in orders.active("retry")) == ORDERS


def test_the_transfer_dlq_commands_take_it(seed: Store, sbdlq: Any) -> None:
    seed.transfer_dead_letter("hop", 3, prefix="x")
    groups = json.loads(sbdlq("transfer-dlq", "inspect-reason", "hop", "--by", "fingerprint", "-o", "json").stdout)
    assert [g["count"] for g in groups] == [3]
    fid = groups[0]["fingerprint"]
    r = sbdlq("transfer-dlq", "peek", "hop", "--fingerprint", fid, "-o", "json")
    assert [m["message_id"] for m in json.loads(r.stdout)] == ["x0", "x1", "x2"]
    other = "0000" if not fid.startswith("0000") else "ffff"
    r = sbdlq("transfer-dlq", "purge", "hop", "--fingerprint", other, "--yes", "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["purged"]) == (0, 0)
    seed.queue("retry")
    r = sbdlq("transfer-dlq", "resubmit", "hop", "--to", "retry", "--fingerprint", fid, "--max", "1", "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["resubmitted"]) == (0, 1)
    assert [m.message_id for m in seed.active("retry")] == ["x0"]
    r = sbdlq("transfer-dlq", "purge", "hop", "--fingerprint", fid, "--yes", "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["purged"]) == (0, 2)
    assert seed.counts("hop").transfer_dead_letter == 0


def test_apply_takes_the_fingerprint_key(orders: Store, sbdlq: Any, tmp_path: Any) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"rules:\n  - name: retry missing orders\n    entities: [orders]\n    fingerprint: {ORDER.id}\n"
        "    resubmit: {}\n"
    )
    r = sbdlq("apply", str(policy), "--yes", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert sorted(m.message_id or "" for m in orders.active("orders")) == ORDERS
    explained = sbdlq("apply", "--explain", str(policy))
    assert f"whose fingerprint is '{ORDER.id}'" in explained.stdout


def test_the_ids_are_the_same_after_a_restart(orders: Store, sbdlq: Any) -> None:
    first = sbdlq("inspect-reason", "orders", "--by", "fingerprint", "-o", "json").stdout
    orders.engine.close()
    from sbdlq.emulator.engine import Engine

    orders.engine = Engine(orders.path, clock=Clock(T0))  # the store reopened, as after a restart
    again = sbdlq("inspect-reason", "orders", "--by", "fingerprint", "-o", "json").stdout
    assert again == first
    assert [g["fingerprint"] for g in json.loads(again)] == [ORDER.id, CUSTOMER.id, TIMEOUT.id]


def test_a_prefix_naming_two_groups_is_refused_before_anything_moves(seed: Store, sbdlq: Any) -> None:
    # Two failures whose ids share their first four hex digits (found by search; ids are pinned by VERSION).
    seed.queue("jobs")
    seed.dead_letter("jobs", 2, "Bad", "stage ala failed", prefix="a")
    seed.dead_letter("jobs", 1, "Bad", "stage apm failed", prefix="b")
    ala, apm = fingerprint("Bad", "stage ala failed").id, fingerprint("Bad", "stage apm failed").id
    assert (ala, apm) == ("bdffdfa1", "bdff2cce")
    before = dlq_ids(seed, "jobs")
    for args in (["purge", "--yes"], ["resubmit"], ["purge", "--dry-run"]):
        r = sbdlq(args[0], "jobs", "--fingerprint", "bdff", *args[1:])
        assert (r.exit_code, r.stdout) == (2, ""), args
        assert r.stderr == (
            "sbdlq: --fingerprint bdff is ambiguous: it starts 2 groups here (bdff2cce, bdffdfa1) "
            "(give more of its 8 hex digits)\n"
        )
    assert dlq_ids(seed, "jobs") == before
    # reads take every group a prefix starts; a longer prefix names one
    assert len(json.loads(sbdlq("peek", "jobs", "--fingerprint", "bdff", "-o", "json").stdout)) == 3
    r = sbdlq("purge", "jobs", "--fingerprint", "bdffd", "--yes", "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["purged"]) == (0, 2)
    assert dlq_ids(seed, "jobs") == ["b0"]
