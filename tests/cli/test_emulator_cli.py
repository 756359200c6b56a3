"""`sbdlq emulator ...`: exact output and exit statuses, on the real engine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
from json_shapes import MESSAGE_KEYS

from sbdlq import terminal
from sbdlq.emulator import discovery
from sbdlq.emulator import store as store_module
from sbdlq.emulator.engine import Engine

EXAMPLE = "/work/shared/reference/emulator-config.example.jsonc"
SUBS = [f"topic.1/Subscriptions/subscription.{i}" for i in range(1, 5)]


@pytest.fixture
def queue(cli: Any) -> str:
    """A store holding one queue `orders` (MaxDeliveryCount 2)."""
    with Engine(cli.store) as engine:
        engine.create_queue("orders", max_delivery_count=2)
    return "orders"


def received(cli: Any, *args: str) -> list[dict[str, Any]]:
    """Messages a `receive ... -o json` returned."""
    code, out, err = cli("emulator", "receive", *args, "-o", "json")
    assert code == 0, err
    result: list[dict[str, Any]] = json.loads(out)
    return result


def counts(cli: Any, entity: str) -> dict[str, Any]:
    code, out, err = cli("count", entity, "-o", "json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)[0]
    return result


# ---------------------------------------------------------------------- init


def test_init_creates_an_empty_store(cli: Any) -> None:
    assert cli("emulator", "init") == (0, f"created emulator store {cli.store} (empty namespace)\n", "")
    assert cli.store.exists()
    assert cli("emulator", "init") == (
        0,
        f"emulator store {cli.store} already exists (0 entities); nothing changed\n",
        "",
    )


def test_init_with_the_official_config(cli: Any) -> None:
    code, out, err = cli("emulator", "init", "--config", EXAMPLE)
    assert (code, err) == (0, "")
    assert out == (
        f"created emulator store {cli.store}\n"
        "created queue queue.1\n"
        "created topic topic.1\n"
        + "".join(f"created subscription {s} (1 rule)\n" for s in SUBS)
        + f"applied {EXAMPLE} (namespace sbemulatorns): 1 queue, 1 topic, 4 subscriptions, 4 rules\n"
    )
    code, out, _ = cli("emulator", "init", "--config", EXAMPLE)
    assert code == 0
    assert out.splitlines()[:3] == [
        f"emulator store {cli.store} already exists",
        "updated queue queue.1",
        "updated topic topic.1",
    ]


def test_init_with_a_malformed_config_creates_nothing(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "Config.json"
    config.write_text('{\n  "UserConfig": {\n    "Namespaces": [\n  }\n}\n')
    assert cli("emulator", "init", "--config", str(config)) == (
        2,
        "",
        f"sbdlq: {config}:4:3: invalid JSON: Expecting value\n",
    )
    assert not cli.store.exists()


def test_init_with_an_invalid_duration(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "Config.json"
    config.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "Namespaces": [{"Name": "ns", "Queues": [{"Name": "q", "Properties": {"LockDuration": "PT1X"}}]}]
                }
            }
        )
    )
    assert cli("emulator", "init", "--config", str(config)) == (
        2,
        "",
        f"sbdlq: {config}: UserConfig.Namespaces[0].Queues[0].Properties.LockDuration: invalid duration 'PT1X' "
        "(ISO 8601, e.g. PT30S, PT5M, P14D)\n",
    )


def test_init_with_a_config_forwarding_nowhere_creates_nothing(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "Config.json"
    queue = {"Name": "q", "Properties": {"ForwardTo": "nowhere"}}
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [queue]}]}}))
    assert cli("emulator", "init", "--config", str(config)) == (
        2,
        "",
        f"sbdlq: {config}: UserConfig.Namespaces[0].Queues[0].Properties.ForwardTo: "
        "'nowhere' is not a queue or topic in the file or the store\n",
    )
    assert not cli.store.exists()


def test_init_with_a_missing_config(cli: Any, tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    assert cli("emulator", "init", "--config", str(missing)) == (2, "", f"sbdlq: {missing}: no such file\n")


# ---------------------------------------------------------------------- list

LIST_TABLE = """\
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━━━┓
┃ entity                               ┃ kind         ┃ active ┃ dead_letter ┃ transfer_dead_letter ┃ scheduled ┃ subscriptions ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━━━┩
│ queue.1                              │ queue        │      2 │           0 │                    0 │         0 │               │
│ topic.1                              │ topic        │        │             │                      │           │ 4             │
│ topic.1/Subscriptions/subscription.1 │ subscription │      0 │           0 │                    0 │         0 │               │
│ topic.1/Subscriptions/subscription.2 │ subscription │      0 │           0 │                    0 │         0 │               │
│ topic.1/Subscriptions/subscription.3 │ subscription │      0 │           0 │                    0 │         0 │               │
│ topic.1/Subscriptions/subscription.4 │ subscription │      0 │           0 │                    0 │         0 │               │
└──────────────────────────────────────┴──────────────┴────────┴─────────────┴──────────────────────┴───────────┴───────────────┘
"""  # noqa: E501


def test_list_table_and_json(cli: Any) -> None:
    assert cli("emulator", "init", "--config", EXAMPLE)[0] == 0
    assert cli("emulator", "send", "queue.1", "--count", "2") == (0, "sent 2 message(s) to queue.1\n", "")
    assert cli("emulator", "list") == (0, LIST_TABLE, "")
    code, out, err = cli("emulator", "list", "-o", "json")
    assert (code, err) == (0, "")
    zero = {"active": 0, "dead_letter": 0, "transfer_dead_letter": 0, "scheduled": 0}
    assert json.loads(out) == [
        {"entity": "queue.1", "kind": "queue", **zero, "active": 2, "subscriptions": None},
        {"entity": "topic.1", "kind": "topic", **dict.fromkeys(zero), "subscriptions": 4},
        *[{"entity": s, "kind": "subscription", **zero, "subscriptions": None} for s in SUBS],
    ]
    code, out, _ = cli("emulator", "list", "-o", "jsonl")
    assert [json.loads(line)["entity"] for line in out.splitlines()] == ["queue.1", "topic.1", *SUBS]


def test_list_an_empty_store(cli: Any) -> None:
    cli("emulator", "init")
    assert cli("emulator", "list") == (
        0,
        f"no entities in {cli.store} (create some with `sbdlq emulator init` or `sbdlq emulator demo`)\n",
        "",
    )
    assert cli("emulator", "list", "-o", "json") == (0, "[]\n", "")


def test_list_without_a_store(cli: Any) -> None:
    assert cli("emulator", "list") == (
        2,
        "",
        f"sbdlq: no emulator store at {cli.store} (create one with `sbdlq emulator init` or `sbdlq emulator demo`)\n",
    )
    assert not cli.store.exists()


def test_list_rejects_a_bad_output_format(cli: Any) -> None:
    cli("emulator", "init")
    assert cli("emulator", "list", "-o", "xml") == (
        2,
        "",
        "sbdlq: invalid output format 'xml' (use table, json, jsonl, yaml, tsv or none)\n",
    )


# ---------------------------------------------------------------------- send


def test_send_with_every_option(cli: Any, queue: str) -> None:
    code, out, err = cli(
        "emulator",
        "send",
        queue,
        "--body",
        '{"id": 1}',
        "--count",
        "3",
        "--message-id",
        "X",
        "--subject",
        "order.created",
        "--property",
        "tenant=contoso",
        "--property",
        "n=42",
        "--property",
        "ratio=1.5",
        "--property",
        "vip=TRUE",
        "--property",
        'code="007"',
        "--property",
        "empty=",
        "--content-type",
        "application/json",
        "--correlation-id",
        "c-1",
        "--ttl",
        "PT10M",
    )
    assert (code, out, err) == (0, "sent 3 message(s) to orders\n", "")
    got = received(cli, queue, "--max", "5", "--complete")
    assert [m["message_id"] for m in got] == ["X-1", "X-2", "X-3"]
    m = got[0]
    assert list(m) == MESSAGE_KEYS
    assert (m["body"], m["body_encoding"], m["subject"], m["content_type"], m["correlation_id"]) == (
        '{"id": 1}',
        "utf-8",
        "order.created",
        "application/json",
        "c-1",
    )
    props = {"tenant": "contoso", "n": 42, "ratio": 1.5, "vip": True, "code": "007", "empty": ""}
    assert m["application_properties"] == props
    assert m["time_to_live_s"] == 600.0
    assert m["delivery_count"] == 1


def test_send_one_keeps_the_message_id(cli: Any, queue: str) -> None:
    cli("emulator", "send", queue, "--message-id", "only")
    assert [m["message_id"] for m in received(cli, queue, "--complete")] == ["only"]


def test_send_body_from_stdin_and_file(cli: Any, queue: str, tmp_path: Path) -> None:
    assert cli("emulator", "send", queue, "--body-file", "-", input=b"\xff\x00raw") == (
        0,
        "sent 1 message(s) to orders\n",
        "",
    )
    body = tmp_path / "body.json"
    body.write_text('{"from": "file"}')
    assert cli("emulator", "send", queue, "--body-file", str(body))[0] == 0
    got = received(cli, queue, "--max", "2", "--complete")
    assert [(m["body"], m["body_encoding"]) for m in got] == [("/wByYXc=", "base64"), ('{"from": "file"}', "utf-8")]


def test_send_scheduled(cli: Any, queue: str) -> None:
    code, out, _ = cli("emulator", "send", queue, "--scheduled-at", "1h")
    assert code == 0
    assert re.fullmatch(r"sent 1 message\(s\) to orders \(scheduled for \d{4}-\d\d-\d\dT[\d:.]+Z\)\n", out)
    assert counts(cli, queue)["scheduled"] == 1
    assert cli("emulator", "send", queue, "--scheduled-at", "2030-01-01T00:00:00Z") == (
        0,
        "sent 1 message(s) to orders (scheduled for 2030-01-01T00:00:00Z)\n",
        "",
    )


def test_send_to_a_topic_fans_out(cli: Any) -> None:
    cli("emulator", "init", "--config", EXAMPLE)
    assert cli("emulator", "send", "topic.1", "--content-type", "application/json") == (
        0,
        "sent 1 message(s) to topic.1\n",
        "",
    )
    assert [counts(cli, s)["active"] for s in SUBS] == [1, 0, 1, 0]
    # A subscription only receives: naming one is a usage error (exit 2), whatever the store holds.
    assert cli("emulator", "send", SUBS[0]) == (
        2,
        "",
        f"sbdlq: cannot send to subscription '{SUBS[0]}' (send to its topic 'topic.1')\n",
    )


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (["nope"], 4, "The messaging entity 'nope' could not be found."),
        (
            ["orders", "--ttl", "PT1X"],
            2,
            "invalid --ttl 'PT1X' (use e.g. 250ms, 30s, 5m, 2h, 3d or ISO 8601 like PT1M)",
        ),
        (["orders", "--ttl", "0s"], 2, "--ttl must be positive, got '0s'"),
        (["orders", "--property", "novalue"], 2, "--property 'novalue': expected KEY=VALUE"),
        (["orders", "--body", "a", "--body-file", "-"], 2, "give --body or --body-file, not both"),
        (["orders", "--body-file", "/nonexistent/b"], 2, "--body-file /nonexistent/b: no such file"),
        (
            ["orders", "--scheduled-at", "someday"],
            2,
            "invalid --scheduled-at 'someday' (use ISO 8601 like 2026-01-31T12:00:00Z or a duration like 10m)",
        ),
        (
            ["orders/Subscriptions/x"],
            2,
            "cannot send to subscription 'orders/Subscriptions/x' (send to its topic 'orders')",
        ),
        (
            ["bad name"],
            2,
            "invalid entity name 'bad name' "
            "(use letters, digits, '.', '-', '_' and '/', starting and ending with a letter or digit)",
        ),
    ],
)
def test_send_errors(cli: Any, queue: str, args: list[str], code: int, line: str) -> None:
    assert cli("emulator", "send", *args) == (code, "", f"sbdlq: {line}\n")
    assert counts(cli, queue)["active"] == 0


def test_send_over_the_maximum_message_size_is_refused_in_one_line(cli: Any, queue: str, tmp_path: Path) -> None:
    """256 KB by default, as on Service Bus Standard: exit 1 with the broker's wording, nothing sent."""
    body = tmp_path / "big.bin"
    body.write_bytes(b"x" * (256 * 1024 + 1))
    assert cli("emulator", "send", queue, "--body-file", str(body)) == (
        1,
        "",
        "sbdlq: The received message (size:262145 bytes) exceeds the limit (262144 bytes) currently allowed on "
        "'orders'.\n",
    )
    assert counts(cli, queue)["active"] == 0
    body.write_bytes(b"x" * (256 * 1024 - 64))
    assert cli("emulator", "send", queue, "--body-file", str(body), "--message-id", "m")[0] == 0


def test_send_count_must_be_positive(cli: Any, queue: str) -> None:
    code, out, err = cli("emulator", "send", queue, "--count", "0")
    assert (code, out) == (2, "")
    assert err.startswith("sbdlq: Invalid value for '--count': 0 is not in the range x>=1.")


# ---------------------------------------------------------------------- receive

RECEIVE_TABLE = """\
┏━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━┓
┃ seq ┃ message_id ┃ deliveries ┃ subject ┃ reason ┃ body     ┃
┡━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━┩
│   1 │ A-1        │          1 │ s1      │        │ {"n": 1} │
│   2 │ A-2        │          1 │ s1      │        │ {"n": 1} │
└─────┴────────────┴────────────┴─────────┴────────┴──────────┘
abandoned 2 message(s) from orders
"""


def test_receive_abandon_then_max_delivery(cli: Any, queue: str) -> None:
    cli("emulator", "send", queue, "--body", '{"n": 1}', "--count", "2", "--message-id", "A", "--subject", "s1")
    assert cli("emulator", "receive", queue, "--max", "5", "--abandon") == (0, RECEIVE_TABLE, "")
    assert counts(cli, queue)["active"] == 2
    # The second abandon spends MaxDeliveryCount (2): both go to the DLQ.
    assert [m["delivery_count"] for m in received(cli, queue, "--max", "5", "--abandon")] == [2, 2]
    assert counts(cli, queue) == {
        "entity": "orders",
        "active": 0,
        "dead_letter": 2,
        "transfer_dead_letter": 0,
        "scheduled": 0,
    }
    got = received(cli, queue, "--sub-queue", "deadletter", "--max", "5", "--complete")
    assert [m["dead_letter_reason"] for m in got] == ["MaxDeliveryCountExceeded"] * 2
    assert counts(cli, queue)["dead_letter"] == 0


def test_receive_dead_letter_with_reason(cli: Any, queue: str) -> None:
    cli("emulator", "send", queue, "--count", "3")
    code, out, err = cli(
        "emulator",
        "receive",
        queue,
        "--max",
        "2",
        "--dead-letter",
        "--reason",
        "ValidationFailed",
        "--description",
        "missing field customerId",
        "-o",
        "jsonl",
    )
    assert code == 0
    assert len(out.splitlines()) == 2
    assert err == "dead-lettered 2 message(s) from orders (reason ValidationFailed)\n"
    code, out, _ = cli("peek", queue, "-o", "json")
    assert [(m["dead_letter_reason"], m["dead_letter_error_description"]) for m in json.loads(out)] == [
        ("ValidationFailed", "missing field customerId")
    ] * 2


def test_receive_defer_and_complete(cli: Any, queue: str) -> None:
    cli("emulator", "send", queue, "--count", "2")
    (deferred,) = received(cli, queue, "--defer")
    # Set aside: a plain receive no longer returns it, only the other one.
    assert [m["sequence_number"] for m in received(cli, queue, "--max", "5", "--complete")] == [2]
    assert deferred["sequence_number"] == 1
    assert received(cli, queue, "--complete") == []


def test_receive_nothing(cli: Any, queue: str) -> None:
    assert cli("emulator", "receive", queue, "--complete") == (0, "no messages available in orders\n", "")
    assert cli("emulator", "receive", f"{queue}/$DeadLetterQueue", "--complete", "-o", "json") == (
        0,
        "[]\n",
        "completed 0 message(s) from orders/$DeadLetterQueue\n",
    )


def test_receive_transfer_dead_letter(cli: Any) -> None:
    with Engine(cli.store) as engine:
        for i in range(1, 7):
            engine.create_queue(f"h{i}", **({"forward_to": f"h{i + 1}"} if i < 6 else {}))
    cli("emulator", "send", "h1", "--message-id", "far")
    got = received(cli, "h5", "--sub-queue", "transferdeadletter", "--complete")
    assert [(m["message_id"], m["dead_letter_reason"]) for m in got] == [("far", "MaxTransferHopCountExceeded")]


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (["--complete", "--abandon"], 2, "choose one action, not --complete and --abandon"),
        (
            ["--defer", "--dead-letter", "--abandon"],
            2,
            "choose one action, not --abandon and --dead-letter and --defer",
        ),
        ([], 2, "say what to do with the messages: --complete, --abandon, --dead-letter or --defer"),
        (["--complete", "--reason", "x"], 2, "--reason and --description go with --dead-letter"),
        (["--complete", "--sub-queue", "nope"], 2, "invalid --sub-queue 'nope' (use deadletter or transferdeadletter)"),
        (["--complete", "--max", "0"], 2, None),
    ],
)
def test_receive_usage_errors(cli: Any, queue: str, args: list[str], code: int, line: str | None) -> None:
    cli("emulator", "send", queue)
    result = cli("emulator", "receive", queue, *args)
    assert result[:2] == (code, "")
    if line is not None:
        assert result.stderr == f"sbdlq: {line}\n"
    assert counts(cli, queue)["active"] == 1  # untouched


def test_receive_unknown_entity(cli: Any, queue: str) -> None:
    assert cli("emulator", "receive", "missing", "--complete") == (
        4,
        "",
        "sbdlq: The messaging entity 'missing' could not be found.\n",
    )


def test_dead_lettering_a_dead_letter_is_refused(cli: Any, queue: str) -> None:
    cli("emulator", "send", queue)
    received(cli, queue, "--dead-letter")
    assert cli("emulator", "receive", queue, "--sub-queue", "deadletter", "--dead-letter") == (
        1,
        "",
        "sbdlq: Cannot dead-letter a message that is already in a dead-letter queue.\n",
    )


# ---------------------------------------------------------------------- demo


def test_demo(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Quick by construction (what a clock measured before, and a busy machine's clock cannot):
    # hours of story played on the demo clock without sleeping, written in one transaction.
    statements: list[str] = []
    real_connect = store_module.connect

    def traced(path: Any) -> Any:
        conn = real_connect(path)
        conn.set_trace_callback(statements.append)
        return conn

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"the demo slept {seconds}s")

    with monkeypatch.context() as patch:
        patch.setattr(store_module, "connect", traced)
        patch.setattr(time, "sleep", no_sleep)
        code, out, err = cli("emulator", "demo")
    assert (code, err) == (0, "")
    assert [s for s in statements if s.split()[0].upper() in ("BEGIN", "COMMIT", "END")] == [
        "BEGIN IMMEDIATE",
        "COMMIT",
    ]
    assert out == (
        f"demo: 16 entities in {cli.store}\n"
        "  orders: 203 in the DLQ (8 reasons: ValidationFailed 60, MaxDeliveryCountExceeded 48, "
        "TTLExpiredException 36, PaymentDeclined 36, DownstreamTimeout 12, HeaderSizeExceeded 4, "
        "SchemaError 4, UnknownTenant 3), 12 active, 3 scheduled\n"
        "  events/Subscriptions/billing: 3 in the DLQ (DuplicateInvoice)\n"
        "  events/Subscriptions/bulk-orders: 2 in the DLQ (DivideByZeroException)\n"
        "  events/Subscriptions/notifications: 40 in the DLQ (Session id is null.)\n"
        "  checkout/Subscriptions/billing: 6 in the DLQ (PaymentGatewayTimeout)\n"
        "  hop5: 10 in the transfer DLQ (MaxTransferHopCountExceeded)\n"
        f"try: sbdlq --emulator {cli.store} inspect-reason orders\n"
    )

    code, out, _ = cli("inspect-reason", "orders", "-o", "json")
    assert code == 0
    reasons = {g["key"]: g["count"] for g in json.loads(out)}
    assert len(reasons) >= 5
    assert {"MaxDeliveryCountExceeded", "TTLExpiredException", "HeaderSizeExceeded"} <= set(reasons)
    assert 100 <= sum(reasons.values()) <= 300

    code, out, _ = cli("transfer-dlq", "peek", "hop5", "-o", "json")
    assert code == 0
    assert {m["dead_letter_reason"] for m in json.loads(out)} == {"MaxTransferHopCountExceeded"}

    code, out, _ = cli("peek", "events/Subscriptions/notifications", "--max", "100", "-o", "json")
    notes = json.loads(out)
    assert len(notes) == 40
    assert {(m["dead_letter_reason"], m["dead_letter_error_description"]) for m in notes} == {
        ("Session id is null.", "Session enabled entity doesn't allow a message whose session identifier is null.")
    }


def test_demo_again_resets_only_the_demo_entities(cli: Any) -> None:
    cli("emulator", "init", "--config", EXAMPLE)
    cli("emulator", "send", "queue.1")
    first = cli("emulator", "demo")
    second = cli("emulator", "demo")
    assert second.exit_code == 0
    assert second.stdout == (
        "reset the demo entities that already existed: "
        "orders, events, hop1, hop2, hop3, hop4, hop5, hop6, billing, checkout\n" + first.stdout
    )
    assert counts(cli, "queue.1")["active"] == 1  # not a demo entity: kept


def test_demo_names_the_store_only_when_given_as_an_option(cli: Any) -> None:
    code, out, _ = cli.bare("emulator", "demo", env={"SBDLQ_EMULATOR": str(cli.store)})
    assert code == 0
    assert out.splitlines()[-1] == "try: sbdlq inspect-reason orders"


# ---------------------------------------------------------------------- reset


def test_reset(cli: Any) -> None:
    cli("emulator", "init", "--config", EXAMPLE)
    assert cli("emulator", "reset") == (
        2,
        "",
        f"sbdlq: reset deletes every entity and message in {cli.store}; pass --yes to confirm\n",
    )
    assert cli("emulator", "reset", "--yes") == (0, f"reset {cli.store}: deleted 6 entities and their messages\n", "")
    assert cli("emulator", "list", "-o", "json") == (0, "[]\n", "")


def test_reset_asks_a_person(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cli("emulator", "init", "--config", EXAMPLE)
    monkeypatch.setattr(terminal, "env", terminal.Environment(stdin_is_terminal=True))
    # CliRunner echoes the answer after the prompt.
    assert cli("emulator", "reset", input="n\n") == (
        1,
        "",
        f"Delete 6 entities and their messages in {cli.store}? [y/N]: n\nsbdlq: reset cancelled; nothing was deleted\n",
    )
    assert cli("emulator", "reset", input="y\n") == (
        0,
        f"reset {cli.store}: deleted 6 entities and their messages\n",
        f"Delete 6 entities and their messages in {cli.store}? [y/N]: y\n",
    )


def test_reset_without_a_store(cli: Any) -> None:
    code, _, err = cli("emulator", "reset", "--yes")
    assert code == 2
    assert err.startswith(f"sbdlq: no emulator store at {cli.store}")


# ---------------------------------------------------------------------- target


def test_emulator_commands_refuse_a_namespace_option(cli: Any) -> None:
    assert cli.bare("--namespace", "contoso", "emulator", "list") == (
        2,
        "",
        "sbdlq: --namespace does not apply to `sbdlq emulator` (it acts on a local store: --emulator PATH)\n",
    )


def test_emulator_commands_ignore_a_connection_string_in_the_environment(cli: Any) -> None:
    env = {"SBDLQ_CONNECTION_STRING": "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s"}
    assert cli("emulator", "init", env=env)[0] == 0
    assert cli("emulator", "list", "-o", "json", env=env) == (0, "[]\n", "")


def test_emulator_commands_refuse_a_namespace_profile(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("profiles:\n  prod:\n    namespace: contoso.servicebus.windows.net\n")
    assert cli.bare("--profile", "prod", "emulator", "list", env={"SBDLQ_CONFIG": str(config)}) == (
        2,
        "",
        "sbdlq: profile prod names a Service Bus namespace, not an emulator store (pass --emulator PATH)\n",
    )


def test_emulator_store_from_a_profile(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"profiles:\n  local:\n    emulator: {cli.store}\n")
    env = {"SBDLQ_CONFIG": str(config)}
    assert cli.bare("--profile", "local", "emulator", "init", env=env) == (
        0,
        f"created emulator store {cli.store} (empty namespace)\n",
        "",
    )


# ---------------------------------------------------------------------- serve


def test_serve_refuses_a_public_host_without_a_key(cli: Any) -> None:
    cli("emulator", "init")
    assert cli("emulator", "serve", "--host", "0.0.0.0") == (
        2,
        "",
        "sbdlq: refusing to serve 0.0.0.0 without a key "
        "(pass --key or set SBDLQ_EMULATOR_KEY so clients must sign, or bind 127.0.0.1)\n",
    )


def test_serve_needs_a_store(cli: Any) -> None:
    assert cli("emulator", "serve") == (
        2,
        "",
        f"sbdlq: no emulator store at {cli.store} (create one with `sbdlq emulator init` or `sbdlq emulator demo`)\n",
    )


def test_serve_without_proton(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cli("emulator", "init")
    monkeypatch.delitem(sys.modules, "sbdlq.emulator.amqp.server", raising=False)
    monkeypatch.setitem(sys.modules, "proton", None)
    assert cli("emulator", "serve") == (
        1,
        "",
        "sbdlq: `sbdlq emulator serve` needs python-qpid-proton (pip install 'sbdlq[amqp]')\n",
    )


def test_serve_passes_options_and_announces_ports(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cli("emulator", "init")
    calls: list[dict[str, Any]] = []

    def fake_serve(store_path: str, **kwargs: Any) -> None:
        calls.append({"store": store_path, **kwargs})
        kwargs["ready"](5999, 5301)
        # Recorded for sbdlq clients that have only the connection string.
        found = discovery.find("localhost", 5999)
        assert found is not None and (found.http_port, found.pid) == (5301, os.getpid())
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler sets stop_event instead of killing us
        assert kwargs["stop_event"].is_set()

    fake = types.ModuleType("sbdlq.emulator.amqp.server")
    fake.serve = fake_serve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sbdlq.emulator.amqp.server", fake)
    before = signal.getsignal(signal.SIGTERM)
    result = cli(
        "emulator",
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "5999",
        "--http-port",
        "5301",
        env={"SBDLQ_EMULATOR_KEY": "s3cret-key"},
    )
    assert result == (
        0,
        "listening on amqp://0.0.0.0:5999 (http 0.0.0.0:5301)\n"
        "connection string: Endpoint=sb://localhost:5999;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=<the key>;UseDevelopmentEmulator=true\n",
        "",
    )
    monkeypatch.setenv("XDG_STATE_HOME", cli.env["XDG_STATE_HOME"])  # where the command wrote it
    assert list(discovery.discovery_dir().iterdir()) == []  # withdrawn on a clean stop
    assert "s3cret" not in result.stdout + result.stderr
    (call,) = calls
    assert {k: call[k] for k in ("store", "host", "port", "http_port", "key")} == {
        "store": str(cli.store),
        "host": "0.0.0.0",
        "port": 5999,
        "http_port": 5301,
        "key": "s3cret-key",
    }
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def test_serve_for_real_until_sigterm(cli: Any) -> None:
    pytest.importorskip("proton")
    cli("emulator", "init")
    env = {**os.environ, "SBDLQ_CONFIG": str(cli.store.parent / "none.yaml")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sbdlq",
            "--emulator",
            str(cli.store),
            "emulator",
            "serve",
            "--port",
            "0",
            "--http-port",
            "0",
            "--key",
            "hidden-key",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert re.fullmatch(r"listening on amqp://127\.0\.0\.1:\d+ \(http 127\.0\.0\.1:\d+\)\n", line), line
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "hidden-key" not in line + out + err


# ---------------------------------------------------------------------- help


def test_python_m_sbdlq_help() -> None:
    done = subprocess.run([sys.executable, "-m", "sbdlq", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "emulator" in done.stdout


def test_emulator_help_lists_the_commands(cli: Any) -> None:
    code, out, _ = cli.bare("emulator", "--help")
    assert code == 0
    for command in ("init", "list", "send", "receive", "demo", "reset", "serve"):
        assert re.search(rf"│ {command}\s", out), command
