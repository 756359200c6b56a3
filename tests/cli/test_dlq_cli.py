"""The DLQ commands through the CLI: exact output, exact stderr lines, exit statuses.

CliRunner gives a non-terminal stdout; COLUMNS=80 fixes the table width. Messages are
seeded through the engine of the store the command reads, with a fixed clock, so times in
the output are known.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from json_shapes import EXPORT_KEYS, MESSAGE_KEYS
from support import APPLICATION_PROPERTIES, Cli, Clock, full_message, producer_fields
from support import Seeder as Store
from support.faults import disk_full_after_exports
from typer.testing import CliRunner

from sbdlq import terminal
from sbdlq.addresses import Address, EntityPath, SubQueue, parse_address
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.cli.main import app
from sbdlq.emulator.engine import Engine
from sbdlq.models import Message, OutboundMessage

T0 = 1_735_689_600.0  # 2025-01-01T00:00:00Z


@pytest.fixture
def broker_clock() -> Clock:
    """A fixed clock, so times in the output are known."""
    return Clock(T0)


@pytest.fixture
def orders(seed: Store) -> Store:
    """Queue `orders`: 3 `Timeout` (o0..o2), then 2 `Poison` (p0, p1) in its DLQ; topic t with s1, s2."""
    seed.engine.create_queue("orders")
    seed.engine.create_topic("t")
    seed.engine.create_subscription("t", "s1")
    seed.engine.create_subscription("t", "s2")
    seed.dead_letter("orders", 3, "Timeout", "took too long", prefix="o")
    seed.clock.advance(3600)
    seed.dead_letter("orders", 2, "Poison", "bad json", prefix="p")
    return seed


def one_line(result: Result) -> str:
    """The single stderr line of a failed command (and no traceback)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def elapsed(text: str) -> str:
    """Output with the run time masked."""
    return re.sub(r"in \d+\.\d\ds", "in X.XXs", re.sub(r'"elapsed_s": [\d.]+', '"elapsed_s": 0', text))


# ---------------------------------------------------------------- count


def _listed_commands(*path: str) -> list[str]:
    """The command names in the Commands panel of `sbdlq PATH --help`."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    panel = result.output.split("Commands")[1]
    return re.findall(r"^│ ([a-z][a-z-]*) ", panel, re.MULTILINE)


def test_root_help_lists_every_command_group() -> None:
    # A group whose module fails to import must break `sbdlq`, never silently vanish from it.
    listed = _listed_commands()
    for command in ("count", "peek", "inspect-reason", "resubmit", "purge", "transfer-dlq", "emulator", "config"):
        assert command in listed, (command, listed)


def test_transfer_dlq_has_the_same_five_commands() -> None:
    assert _listed_commands("transfer-dlq") == ["count", "peek", "inspect-reason", "resubmit", "purge"]


def test_count_without_entities_lists_every_queue_and_subscription(orders: Store, sbdlq: Any) -> None:
    orders.engine.send("t", [OutboundMessage(body=b"x")])
    r = sbdlq("count")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (
        "┏━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┓\n"
        "┃ entity             ┃ active ┃ dead_letter ┃ transfer_dead_letter ┃ scheduled ┃\n"
        "┡━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━┩\n"
        "│ orders             │      0 │           5 │                    0 │         0 │\n"
        "│ t/Subscriptions/s1 │      1 │           0 │                    0 │         0 │\n"
        "│ t/Subscriptions/s2 │      1 │           0 │                    0 │         0 │\n"
        "└────────────────────┴────────┴─────────────┴──────────────────────┴───────────┘\n"
    )


def test_count_json_jsonl_yaml(orders: Store, sbdlq: Any) -> None:
    rows = [
        {"entity": "orders", "active": 0, "dead_letter": 5, "transfer_dead_letter": 0, "scheduled": 0},
        {"entity": "t/Subscriptions/s1", "active": 0, "dead_letter": 0, "transfer_dead_letter": 0, "scheduled": 0},
    ]
    r = sbdlq("count", "orders", "t/subscriptions/s1", "-o", "json")
    assert r.exit_code == 0
    assert r.stdout == json.dumps(rows, indent=2) + "\n"
    r = sbdlq("count", "orders/$DeadLetterQueue", "t/Subscriptions/s1", "-o", "jsonl")
    assert r.stdout == "".join(json.dumps(row) + "\n" for row in rows)
    r = sbdlq("count", "orders", "t/Subscriptions/s1", "--output", "yaml")
    assert r.stdout == (
        "- entity: orders\n"
        "  active: 0\n"
        "  dead_letter: 5\n"
        "  transfer_dead_letter: 0\n"
        "  scheduled: 0\n"
        "- entity: t/Subscriptions/s1\n"
        "  active: 0\n"
        "  dead_letter: 0\n"
        "  transfer_dead_letter: 0\n"
        "  scheduled: 0\n"
    )
    assert yaml.safe_load(r.stdout) == rows


def test_count_fail_above(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("count", "orders", "--fail-above", "5", "-o", "jsonl")
    assert (r.exit_code, r.stderr) == (0, "")
    r = sbdlq("count", "--fail-above", "4", "-o", "jsonl")
    assert r.exit_code == 3
    # The counts are still printed, for the log of the job that failed.
    assert len(r.stdout.splitlines()) == 3
    assert one_line(r) == "sbdlq: orders: 5 messages in the dead-letter queue, above 4"
    orders.dead_letter("t/Subscriptions/s1", 7, prefix="s")
    r = sbdlq("count", "--fail-above", "4", "-o", "json")
    assert r.exit_code == 3
    assert one_line(r) == ("sbdlq: t/Subscriptions/s1: 7 messages in the dead-letter queue, above 4 (2 entities over)")


def test_count_of_an_unknown_entity_exits_4(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("count", "orders", "nope")
    assert r.exit_code == 4
    assert r.stdout == ""
    assert one_line(r) == "sbdlq: The messaging entity 'nope' could not be found."


# ---------------------------------------------------------------- peek


def test_peek_json_is_the_message_shape(seed: Store, sbdlq: Any) -> None:
    seed.engine.create_queue("q")
    seed.dead_letter("q", [full_message(), OutboundMessage(body=b"\xff\x00", message_id="bin")], "Poison", "bad json")
    r = sbdlq("peek", "q", "-o", "json")
    assert (r.exit_code, r.stderr) == (0, "")
    docs = json.loads(r.stdout)
    assert [list(d) for d in docs] == [MESSAGE_KEYS, MESSAGE_KEYS]
    assert docs[0] == {
        "sequence_number": 1,
        "message_id": "id-7",
        "enqueued_time": "2025-01-01T00:00:00Z",
        "expires_at": "2025-01-01T01:00:00Z",
        "delivery_count": 1,
        "dead_letter_reason": "Poison",
        "dead_letter_error_description": "bad json",
        "dead_letter_source": None,
        "subject": "orders",
        "correlation_id": "corr",
        "content_type": "application/json",
        "session_id": "s-1",
        "reply_to": "replies",
        "to": "fulfilment",
        "time_to_live_s": 3600.0,
        "application_properties": {
            "tenant": "eu",
            "attempt": 2,
            "vip": True,
            "ratio": 0.5,
            "DeadLetterReason": "Poison",
            "DeadLetterErrorDescription": "bad json",
        },
        "body": '{"order": 7}',
        "body_encoding": "utf-8",
    }
    assert (docs[1]["body"], docs[1]["body_encoding"]) == ("/wA=", "base64")
    # jsonl: the same objects, one per line.
    r = sbdlq("peek", "q", "-o", "jsonl")
    assert [json.loads(line) for line in r.stdout.splitlines()] == docs


def test_peek_table_off_a_terminal_shows_every_column(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("peek", "orders", "--max", "2")
    assert r.exit_code == 0
    assert r.stdout == (
        "                               orders/$DeadLetterQueue: 2 message(s)                               \n"
        "┏━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━┓\n"
        "┃ seq ┃ enqueued             ┃ deliveries ┃ reason  ┃ description   ┃ subject ┃ message_id ┃ body ┃\n"
        "┡━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━┩\n"
        "│   1 │ 2025-01-01T00:00:00Z │          1 │ Timeout │ took too long │         │ o0         │ o0   │\n"
        "│   2 │ 2025-01-01T00:00:00Z │          1 │ Timeout │ took too long │         │ o1         │ o1   │\n"
        "└─────┴──────────────────────┴────────────┴─────────┴───────────────┴─────────┴────────────┴──────┘\n"
    )
    # There are more: say how to see them, on stderr.
    assert r.stderr == "sbdlq: showing the first 2; see more with --from-sequence 3, --max N or --all\n"


def test_peek_table_cuts_long_and_hostile_content(seed: Store, sbdlq: Any) -> None:
    seed.engine.create_queue("q")
    hostile = OutboundMessage(
        body=b"[/x] [bold]not markup[/bold]\x1b[2J\nsecond line " + b"z" * 200,
        message_id="a-message-id-that-is-far-too-long-to-show-in-full",
    )
    seed.dead_letter("q", [hostile], "MaxDeliveryCountExceeded", "Message could not be consumed after 10 attempts.")
    r = sbdlq("peek", "q")
    assert (r.exit_code, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    # Off a terminal the reason and message id are whole; description and body are cut with an ellipsis.
    assert lines[4] == (
        "│   1 │ 2025-01-01T00:00:00Z │          1 │ MaxDeliveryCountExceeded "
        "│ Message could not be consumed after 10 … "
        "│         │ a-message-id-that-is-far-too-long-to-show-in-full "
        "│ [/x] [bold]not markup[/bold]\N{REPLACEMENT CHARACTER}[2J second line zzzzzzzzzzzzzz… │"
    )
    assert "\x1b" not in r.stdout


def test_peek_max_all_and_from_sequence(seed: Store, sbdlq: Any) -> None:
    seed.engine.create_queue("q")
    seed.dead_letter("q", 600)
    r = sbdlq("peek", "q", "-o", "jsonl")
    assert len(r.stdout.splitlines()) == 600  # a machine format: every message unless --max
    r = sbdlq("peek", "q", "-o", "jsonl", "--max", "3", "--from-sequence", "598")
    assert [json.loads(line)["sequence_number"] for line in r.stdout.splitlines()] == [598, 599, 600]
    # --all over several pages is still one JSON document.
    r = sbdlq("peek", "q", "--all", "-o", "json")
    assert (r.exit_code, r.stderr) == (0, "")
    docs = json.loads(r.stdout)
    assert [d["sequence_number"] for d in docs] == list(range(1, 601))


def test_peek_of_an_empty_dlq(seed: Store, sbdlq: Any) -> None:
    seed.engine.create_queue("q")
    assert sbdlq("peek", "q", "-o", "json").stdout == "[]\n"
    assert sbdlq("peek", "q", "-o", "yaml").stdout == "[]\n"
    assert sbdlq("peek", "q", "-o", "jsonl").stdout == ""
    r = sbdlq("peek", "q")
    assert r.stdout.splitlines()[0].strip() == "q/$DeadLetterQueue: 0 message(s)"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--reason", "poison"], ["p0", "p1"]),
        (["--reason", "Poison", "--reason", "TIMEOUT"], ["o0", "o1", "o2", "p0", "p1"]),
        (["--description-contains", "TOO"], ["o0", "o1", "o2"]),
        (["--sequence", "2-3", "--sequence", "5"], ["o1", "o2", "p1"]),
        (["--where", "sys.MessageId LIKE 'p%' OR sys.SequenceNumber = 1"], ["o0", "p0", "p1"]),
        (
            ["--where", "sys.MessageId LIKE @like OR sys.SequenceNumber = @n", "--param", "like=p%", "--param", "@n=1"],
            ["o0", "p0", "p1"],
        ),
        (["--where", "DeadLetterReason = @why", "--param", "why=Poison"], ["p0", "p1"]),
        (["--enqueued-after", "2025-01-01T00:30:00Z"], ["p0", "p1"]),
        (["--enqueued-before", "2025-01-01T00:30:00"], ["o0", "o1", "o2"]),
        (["--body-regex", "^o[02]$"], ["o0", "o2"]),
        (["--body-contains", "1"], ["o1", "p1"]),
        (["--property", "DeadLetterReason=Poison", "--max", "1"], ["p0"]),
    ],
)
def test_peek_selection(orders: Store, sbdlq: Any, options: list[str], expected: list[str]) -> None:
    r = sbdlq("peek", "orders", "-o", "jsonl", *options)
    assert (r.exit_code, r.stderr) == (0, "")
    assert [json.loads(line)["message_id"] for line in r.stdout.splitlines()] == expected


def test_peek_changes_nothing(orders: Store, sbdlq: Any) -> None:
    before = orders.snapshot("orders")
    sbdlq("peek", "orders", "--all", "-o", "json")
    assert orders.snapshot("orders") == before


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--where", "x ="],
            "sbdlq: invalid --where expression: syntax error at position 4: unexpected end of expression",
        ),
        (["--sequence", "a-b"], "sbdlq: invalid --sequence 'a-b' (use N, N-M, N- or -M)"),
        (
            ["--enqueued-before", "last tuesday"],
            "sbdlq: invalid --enqueued-before 'last tuesday' "
            "(use ISO 8601 like 2026-01-31T12:00:00Z or a duration like 2h)",
        ),
        (["--body-regex", "[z-a]"], "sbdlq: invalid --body-regex '[z-a]': bad character range z-a at position 1"),
        (["-o", "xml"], "sbdlq: invalid output format 'xml' (use table, json, jsonl, yaml, tsv or none)"),
        (["--property", "novalue"], "sbdlq: invalid --property 'novalue' (use NAME=VALUE)"),
        (["--param", "a=1"], "sbdlq: --param gives a value to a @name of --where: it needs --where"),
        (["--where", "x = @a", "--param", "a"], "sbdlq: invalid --param 'a' (use NAME=VALUE, for @NAME in --where)"),
        (
            ["--where", "x = @a"],
            "sbdlq: invalid --where expression: syntax error at position 5: parameter @a has no value "
            "(give it in the parameters)",
        ),
        (["--max", "0"], "sbdlq: Invalid value for '--max': 0 is not in the range x>=1. (see 'sbdlq peek --help')"),
    ],
)
def test_bad_input_exits_2_with_one_line(orders: Store, sbdlq: Any, args: list[str], line: str) -> None:
    r = sbdlq("peek", "orders", *args)
    assert r.exit_code == 2
    assert r.stdout == ""
    assert one_line(r) == line


def test_unknown_entity_exits_4_for_every_command(orders: Store, sbdlq: Any) -> None:
    for command in (["peek"], ["inspect-reason"], ["resubmit"], ["purge", "--yes"], ["transfer-dlq", "peek"]):
        r = sbdlq(*command, "nope", "-o", "json")
        assert r.exit_code == 4, command
        assert one_line(r) == "sbdlq: The messaging entity 'nope' could not be found."
        assert r.stdout == ""


# ---------------------------------------------------------------- inspect-reason


def test_inspect_reason_table(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason", "orders")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (
        "                          5 message(s) by reason                           \n"
        "┏━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┓\n"
        "┃ key     ┃ count ┃ first_enqueued       ┃ last_enqueued        ┃ samples ┃\n"
        "┡━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━┩\n"
        "│ Timeout │     3 │ 2025-01-01T00:00:00Z │ 2025-01-01T00:00:00Z │ 1, 2, 3 │\n"
        "│ Poison  │     2 │ 2025-01-01T01:00:00Z │ 2025-01-01T01:00:00Z │ 4, 5    │\n"
        "└─────────┴───────┴──────────────────────┴──────────────────────┴─────────┘\n"
    )


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ("reason", [("Timeout", 3), ("Poison", 2)]),
        ("description", [("took too long", 3), ("bad json", 2)]),
        ("subject", [("(none)", 5)]),
        ("source", [("(none)", 5)]),
        ("property:DeadLetterReason", [("Timeout", 3), ("Poison", 2)]),
        ("hour", [("2025-01-01T00:00Z", 3), ("2025-01-01T01:00Z", 2)]),
        ("day", [("2025-01-01", 5)]),
    ],
)
def test_inspect_reason_by(orders: Store, sbdlq: Any, by: str, expected: list[tuple[str, int]]) -> None:
    r = sbdlq("inspect-reason", "orders", "--by", by, "-o", "json")
    assert r.exit_code == 0
    groups = json.loads(r.stdout)
    assert [(g["key"], g["count"]) for g in groups] == expected


def test_inspect_reason_json_shape_and_selection(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("inspect-reason", "orders", "--sequence", "3-", "-o", "json")
    assert json.loads(r.stdout) == [
        {
            "key": "Poison",
            "count": 2,
            "first_enqueued": "2025-01-01T01:00:00Z",
            "last_enqueued": "2025-01-01T01:00:00Z",
            "sample_sequence_numbers": [4, 5],
        },
        {
            "key": "Timeout",
            "count": 1,
            "first_enqueued": "2025-01-01T00:00:00Z",
            "last_enqueued": "2025-01-01T00:00:00Z",
            "sample_sequence_numbers": [3],
        },
    ]
    r = sbdlq("inspect-reason", "orders", "--by", "colour")
    assert r.exit_code == 2
    assert one_line(r) == (
        "sbdlq: invalid --by 'colour' (use reason, description, fingerprint, source, subject, "
        "property:NAME, hour, day or entity)"
    )


# ---------------------------------------------------------------- resubmit


def test_resubmit_everything(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("resubmit", "orders")
    assert r.exit_code == 0
    assert elapsed(r.stdout) == "resubmitted 5 of 5 selected message(s) in X.XXs\n"
    assert r.stderr == "sbdlq: plan: resubmit 5 message(s) from orders/$DeadLetterQueue to orders\n"
    assert orders.dlq("orders") == []
    assert [m.message_id for m in orders.active("orders")] == ["o0", "o1", "o2", "p0", "p1"]


def test_resubmit_json_result(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("resubmit", "orders", "--reason", "poison", "-o", "json")
    assert r.exit_code == 0
    assert json.loads(elapsed(r.stdout)) == {
        "selected": 2,
        "resubmitted": 2,
        "failed": 0,
        "not_tried": 0,
        "left_beside_copy": 0,
        "left_unconfirmed": 0,
        "left_unchecked": 0,
        "not_received": 0,
        "not_matching": 3,
        "skipped": 3,
        "unroutable": 0,
        "dry_run": False,
        "elapsed_s": 0,
        "sdk_fallbacks": [],
    }


def test_resubmit_dry_run_changes_nothing(orders: Store, sbdlq: Any) -> None:
    before = orders.snapshot("orders")
    r = sbdlq("resubmit", "orders", "--dry-run", "--reason", "Timeout")
    assert r.exit_code == 0
    assert r.stdout == "dry run: 3 message(s) would be resubmitted\n"
    assert r.stderr == "sbdlq: plan: resubmit 3 message(s) from orders/$DeadLetterQueue to orders (dry run)\n"
    assert orders.snapshot("orders") == before
    assert orders.active("orders") == []


def test_selective_resubmit_keeps_properties_and_leaves_the_rest_available(seed: Store, sbdlq: Any) -> None:
    seed.engine.create_queue("q")
    # No duplicate detection here: a target with it is refused unless --new-message-id
    # (tests/cli/test_resubmit_safety.py), and this copy keeps its id.
    seed.engine.create_queue("retry")
    full = full_message()
    seed.dead_letter("q", 2, "Timeout", prefix="a")
    seed.dead_letter("q", [full], "Poison", "bad")
    seed.dead_letter("q", 2, "Timeout", prefix="b")
    counted = {m.message_id: m.delivery_count for m in seed.dlq("q")}
    r = sbdlq(
        "resubmit", "q", "--to", "retry", "--reason", "Poison", "--keep-dead-letter-properties", "--batch-size", "1"
    )
    assert r.exit_code == 0, r.output
    # The emulator gives passed-over messages back without counting a delivery.
    assert {m.message_id: m.delivery_count for m in seed.dlq("q")} == {k: counted[k] for k in ("a0", "a1", "b0", "b1")}
    # Not matching: every message the plan's scan passed over, those after the match too.
    assert elapsed(r.stdout) == "resubmitted 1 of 1 selected message(s) in X.XXs (4 not matching)\n"
    assert r.stderr.splitlines() == ["sbdlq: plan: resubmit 1 message(s) from q/$DeadLetterQueue to retry"]
    (copy,) = seed.active("retry")
    assert producer_fields(copy) == producer_fields(full)
    assert copy.application_properties == {
        **APPLICATION_PROPERTIES,
        "DeadLetterReason": "Poison",
        "DeadLetterErrorDescription": "bad",
        "sbdlq-resubmitted-from": "q/$DeadLetterQueue:3",
        "sbdlq-attempt": 1,
    }
    # The skipped ones are back in the DLQ, unlocked, the moment the command ends.
    assert seed.available("q") == ["a0", "a1", "b0", "b1"]


def test_resubmit_new_message_id(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("resubmit", "orders", "--new-message-id", "--sequence", "1", "-o", "json")
    assert r.exit_code == 0
    (copy,) = orders.active("orders")
    assert copy.body == b"o0" and copy.message_id not in (None, "o0")
    assert "DeadLetterReason" not in copy.application_properties


def test_resubmit_a_subscription_goes_to_its_topic(orders: Store, sbdlq: Any) -> None:
    orders.dead_letter("t/Subscriptions/s1", 2, prefix="s")
    orders.engine.receive(Address(EntityPath("t", "s2")), 10, mode=_delete())
    refusal = (
        "sbdlq: resubmitting t/Subscriptions/s1/$DeadLetterQueue to topic t would also give copies to its "
        "subscription(s) s2 (every copy) (add --only-this-subscription (after `sbdlq routing enable-targeted t`) "
        "to reach it alone, --fan-out to accept that, or resubmit --to a queue that only this subscription's "
        "consumer reads)"
    )
    for dry in (["--dry-run"], []):
        r = sbdlq("resubmit", "t/Subscriptions/s1", *dry)
        assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (2, "", [refusal])
    assert orders.active("t/Subscriptions/s2") == [] and len(orders.dlq("t/Subscriptions/s1")) == 2
    r = sbdlq("resubmit", "t/Subscriptions/s1", "--dry-run", "--fan-out")
    assert r.exit_code == 0
    assert r.stderr.splitlines() == [
        "sbdlq: plan: resubmit 2 message(s) from t/Subscriptions/s1/$DeadLetterQueue to topic t (dry run)",
        "sbdlq: note: topic t has 2 subscription(s): every subscription whose rules match gets a copy, not only s1",
    ]
    r = sbdlq("resubmit", "t/Subscriptions/s1", "--fan-out")
    assert r.exit_code == 0
    assert [m.message_id for m in orders.active("t/Subscriptions/s1")] == ["s0", "s1"]
    assert [m.message_id for m in orders.active("t/Subscriptions/s2")] == ["s0", "s1"]


def _delete() -> Any:
    from sbdlq.backends.base import ReceiveMode

    return ReceiveMode.RECEIVE_AND_DELETE


def test_resubmit_max(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("resubmit", "orders", "--max", "2")
    assert elapsed(r.stdout) == "resubmitted 2 of 2 selected message(s) in X.XXs\n"
    assert orders.dlq_ids("orders") == ["o2", "p0", "p1"]


def test_resubmit_to_a_disabled_target_fails_and_keeps_everything(orders: Store, sbdlq: Any) -> None:
    orders.engine.set_status("orders", "Disabled")
    r = sbdlq("resubmit", "orders", "--batch-size", "2", "--concurrency", "1")
    assert r.exit_code == 1
    # The first chunk (a batch: the emulator moves in one transaction) failed; the rest was never tried.
    assert elapsed(r.stdout) == "resubmitted 0 of 5 selected message(s) in X.XXs (2 failed, 3 not tried)\n"
    assert r.stderr.splitlines() == [
        "sbdlq: plan: resubmit 5 message(s) from orders/$DeadLetterQueue to orders",
        "sbdlq: send to orders failed: Messaging entity 'orders' is currently disabled.; "
        "5 message(s) were not resubmitted and remain in the queue; run the command again to retry",
    ]
    assert orders.available("orders") == ["o0", "o1", "o2", "p0", "p1"]


def test_resubmit_a_copy_the_target_refuses_stays_in_the_dlq_and_the_rest_moves(orders: Store, sbdlq: Any) -> None:
    """The emulator sends a chunk's copies and completes its originals in one transaction: the copy
    the target refuses (over its size limit) leaves its original in the DLQ, and nothing half done."""
    orders.engine.create_queue("small", max_message_size_kb=1)
    orders.dead_letter("orders", [OutboundMessage(body=b"x" * 2048, message_id="big")], "Huge")
    r = sbdlq("resubmit", "orders", "--to", "small")
    assert r.exit_code == 1
    assert elapsed(r.stdout) == "resubmitted 5 of 6 selected message(s) in X.XXs (1 failed)\n"
    assert r.stderr.splitlines()[-1] == (
        "sbdlq: send to small refused sequence number 6: The received message (size:2119 bytes) exceeds the limit "
        "(1024 bytes) currently allowed on 'small'.; 1 message(s) were not resubmitted and remain in the queue; "
        "run the command again to retry"
    )
    assert [m.message_id for m in orders.active("small")] == ["o0", "o1", "o2", "p0", "p1"]
    assert orders.available("orders") == ["big"]


@pytest.mark.parametrize(
    ("args", "status", "line"),
    [
        (
            ["--to", "t/Subscriptions/s1"],
            2,
            "sbdlq: --to 't/Subscriptions/s1': cannot send to a subscription; name its topic",
        ),
        (
            ["--to", "orders/$DeadLetterQueue"],
            2,
            "sbdlq: --to 'orders/$DeadLetterQueue': cannot send to a dead-letter queue",
        ),
        (["--to", "missing"], 4, "sbdlq: The messaging entity 'missing' could not be found."),
        (["--concurrency", "0"], 2, None),
    ],
)
def test_resubmit_bad_targets(orders: Store, sbdlq: Any, args: list[str], status: int, line: str | None) -> None:
    before = orders.snapshot("orders")
    r = sbdlq("resubmit", "orders", *args)
    assert r.exit_code == status
    if line is not None:
        assert one_line(r) == line
    assert orders.snapshot("orders") == before


@pytest.fixture
def ctrl_c_delivered() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt even where SIGINT was inherited as ignored (CI jobs
    started in the background), as it does at an operator's terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# The emulator moves a batch in one call: without locks (move_available), or, where a run
# needs chunks of its own (--rate), sends each chunk's copies and completes its originals in one call.
@pytest.mark.parametrize(("moving_call", "extra"), [("move_available", []), ("send_and_complete", ["--rate", "1000"])])
@pytest.mark.usefixtures("ctrl_c_delivered")
def test_resubmit_interrupted_exits_130_and_loses_nothing(
    orders: Store, sbdlq: Any, monkeypatch: pytest.MonkeyPatch, moving_call: str, extra: list[str]
) -> None:
    real_move = getattr(EmulatorBackend, moving_call)
    calls = 0

    async def move_then_ctrl_c(self: EmulatorBackend, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(0.05)  # the round trip the Ctrl-C lands in
        return await real_move(self, *args, **kwargs)

    monkeypatch.setattr(EmulatorBackend, moving_call, move_then_ctrl_c)
    r = sbdlq("resubmit", "orders", "--concurrency", "1", "--batch-size", "1", *extra)
    assert r.exit_code == 130
    assert r.stderr.splitlines()[-1] == "sbdlq: interrupted; messages not yet settled stay in their queue"
    moved = [m.message_id or "" for m in orders.active("orders")]
    left = orders.available("orders")
    assert sorted(moved + left) == ["o0", "o1", "o2", "p0", "p1"]
    assert moved == ["o0", "o1"]


# ---------------------------------------------------------------- purge


def test_purge_needs_yes_without_a_terminal(orders: Store, sbdlq: Any) -> None:
    before = orders.snapshot("orders")
    r = sbdlq("purge", "orders")
    assert r.exit_code == 2
    assert one_line(r) == "sbdlq: purge needs --yes when stdin is not a terminal (or try --dry-run first)"
    assert orders.snapshot("orders") == before


def test_purge_dry_run_changes_nothing(orders: Store, sbdlq: Any, tmp_path: Path) -> None:
    before = orders.snapshot("orders")
    r = sbdlq("purge", "orders", "--dry-run", "--export", str(tmp_path / "x.jsonl"))
    assert r.exit_code == 0
    assert r.stdout == "dry run: 5 message(s) would be deleted\n"
    assert r.stderr == "sbdlq: plan: export and delete 5 message(s) from orders/$DeadLetterQueue (dry run)\n"
    r = sbdlq("purge", "orders", "--dry-run", "--reason", "poison", "-o", "json")
    assert json.loads(elapsed(r.stdout)) == {
        "selected": 2,
        "purged": 0,
        "exported": 0,
        "failed": 0,
        "not_tried": 0,
        "left_beside_copy": 0,
        "left_unchecked": 0,
        "not_received": 0,
        "not_matching": 3,
        "dry_run": True,
        "elapsed_s": 0,
        "sdk_fallbacks": [],
    }
    assert orders.snapshot("orders") == before
    assert not (tmp_path / "x.jsonl").exists()


def test_purge_export_that_deletes_nothing_makes_no_file(orders: Store, sbdlq: Any, tmp_path: Path) -> None:
    """Issue 34 item 7: a selection that matches nothing, or matches only what another receiver
    holds, deletes nothing and leaves no export file."""
    out = tmp_path / "x.jsonl"
    r = sbdlq("purge", "orders", "--yes", "--reason", "NoSuchReason", "--export", str(out))
    assert (r.exit_code, elapsed(r.stdout)) == (0, "purged 0 of 0 selected message(s) in X.XXs (5 not matching)\n")
    assert not out.exists()
    assert orders.path is not None
    other = Engine(orders.path)  # another receiver, on the real clock the command reads
    held = other.receive(parse_address("orders/$DeadLetterQueue"), 10)
    other.close()
    assert len(held) == 5
    r = sbdlq("purge", "orders", "--yes", "--reason", "Timeout", "--export", str(out))
    assert r.exit_code == 0, r.stderr
    assert "not received" in r.stdout
    assert not out.exists()
    assert len(orders.dlq("orders")) == 5


def test_purge_with_yes(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("purge", "orders", "--yes", "--reason", "Timeout")
    assert r.exit_code == 0
    # The Poison ones come after the last Timeout one: the plan's scan passed them over (issue 26 #4:
    # selected and not matching add up to the DLQ's 5).
    assert elapsed(r.stdout) == "purged 3 of 3 selected message(s) in X.XXs (2 not matching)\n"
    assert orders.dlq_ids("orders") == ["p0", "p1"]
    r = sbdlq("purge", "orders", "-y", "-o", "json")
    assert json.loads(elapsed(r.stdout))["purged"] == 2
    assert orders.dlq("orders") == []


def test_selective_purge_counts_what_it_passed_over_as_not_matching(orders: Store, sbdlq: Any) -> None:
    counted = {m.message_id: m.delivery_count for m in orders.dlq("orders")}
    r = sbdlq("purge", "orders", "--yes", "--reason", "Poison")
    assert r.exit_code == 0
    # The Timeout ones come first: scanned, did not match, given back.
    assert elapsed(r.stdout) == "purged 2 of 2 selected message(s) in X.XXs (3 not matching)\n"
    assert {m.message_id: m.delivery_count for m in orders.dlq("orders")} == {k: counted[k] for k in ("o0", "o1", "o2")}


def test_purge_older_than(orders: Store, sbdlq: Any) -> None:
    # Everything was enqueued in 2025: nothing is younger than a day.
    r = sbdlq("purge", "orders", "--yes", "--older-than", "1d", "--max", "4")
    assert elapsed(r.stdout) == "purged 4 of 4 selected message(s) in X.XXs\n"
    assert orders.dlq_ids("orders") == ["p1"]
    r = sbdlq("purge", "orders", "--yes", "--older-than", "forever")
    assert r.exit_code == 2


def test_export_then_purge_loses_nothing(orders: Store, sbdlq: Any, tmp_path: Path) -> None:
    orders.dead_letter("orders", [OutboundMessage(body=b"\x00\xff", message_id="bin")], "Binary")
    expected = orders.dlq_ids("orders")
    out = tmp_path / "dlq.jsonl"
    r = sbdlq("purge", "orders", "--yes", "--export", str(out), "--batch-size", "4")
    assert r.exit_code == 0
    assert elapsed(r.stdout) == "purged 6 of 6 selected message(s) in X.XXs (6 exported)\n"
    docs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [d["message_id"] for d in docs] == expected
    # The Message shape, each marked deleted once its delete was confirmed.
    assert all(list(d) == EXPORT_KEYS and d["sbdlq_deleted"] == 1 for d in docs)
    assert orders.dlq("orders") == []


def test_purge_export_failure_deletes_only_what_was_exported(
    seed: Store, sbdlq: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed.engine.create_queue("q")
    seed.dead_letter("q", 10)
    out = tmp_path / "dlq.jsonl"
    disk_full_after_exports(monkeypatch, 1)
    r = sbdlq("purge", "q", "--yes", "--export", str(out), "--batch-size", "4")
    monkeypatch.undo()
    assert r.exit_code == 1
    assert elapsed(r.stdout) == "purged 4 of 10 selected message(s) in X.XXs (4 exported, 4 failed, 2 not tried)\n"
    assert r.stderr.splitlines() == [
        "sbdlq: plan: export and delete 10 message(s) from q/$DeadLetterQueue",
        f"sbdlq: cannot write export file {out}: No space left on device; "
        "6 message(s) were not purged and remain in the queue; run the command again to retry",
    ]
    exported = [json.loads(line)["message_id"] for line in out.read_text().splitlines()]
    assert exported == ["m0", "m1", "m2", "m3"]
    assert seed.available("q") == sorted(f"m{i}" for i in range(4, 10))


def test_purge_export_to_a_bad_path_exits_2(orders: Store, sbdlq: Any, tmp_path: Path) -> None:
    r = sbdlq("purge", "orders", "--yes", "--export", str(tmp_path / "no" / "x.jsonl"))
    assert r.exit_code == 2
    assert one_line(r) == f"sbdlq: --export {tmp_path / 'no' / 'x.jsonl'}: directory {tmp_path / 'no'} does not exist"
    r = sbdlq("purge", "orders", "--yes", "--export", str(tmp_path))
    assert one_line(r) == f"sbdlq: --export {tmp_path}: is a directory"
    assert len(orders.dlq("orders")) == 5


def test_purge_asks_a_person_with_the_count(orders: Store, sbdlq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(terminal, "env", terminal.Environment(stdin_is_terminal=True))
    r = sbdlq("purge", "orders", "--reason", "poison", input="n\n")
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [
        "sbdlq: plan: delete 2 message(s) from orders/$DeadLetterQueue",
        # CliRunner echoes the answer after the prompt.
        "Delete 2 message(s) from orders/$DeadLetterQueue? [y/N]: n",
        "sbdlq: purge cancelled; nothing was deleted",
    ]
    assert len(orders.dlq("orders")) == 5
    r = sbdlq("purge", "orders", "--reason", "poison", input="y\n")
    assert r.exit_code == 0
    assert orders.dlq_ids("orders") == ["o0", "o1", "o2"]


# ---------------------------------------------------------------- transfer-dlq


@pytest.fixture
def transfer(seed: Store) -> Store:
    """Queue fwd forwards to a missing queue: 3 messages in its transfer DLQ, 1 in its DLQ."""
    seed.engine.create_queue("fwd")
    seed.dead_letter("fwd", 1, prefix="d")
    seed.engine.create_queue("fwd", exist_ok=True, forward_to="gone")
    seed.engine.send("fwd", [OutboundMessage(body=f"x{i}".encode(), message_id=f"x{i}") for i in range(3)])
    seed.engine.create_queue("gone")
    return seed


def test_transfer_dlq_count_and_fail_above(transfer: Store, sbdlq: Any) -> None:
    r = sbdlq("transfer-dlq", "count", "fwd", "-o", "json")
    assert json.loads(r.stdout) == [
        {"entity": "fwd", "active": 0, "dead_letter": 1, "transfer_dead_letter": 3, "scheduled": 0}
    ]
    r = sbdlq("transfer-dlq", "count", "fwd", "--fail-above", "2", "-o", "json")
    assert r.exit_code == 3
    assert one_line(r) == "sbdlq: fwd: 3 messages in the transfer dead-letter queue, above 2"
    # The DLQ command looks at the DLQ count: 1 is not above 2.
    assert sbdlq("count", "fwd", "--fail-above", "2", "-o", "json").exit_code == 0


def test_transfer_dlq_peek_and_inspect(transfer: Store, sbdlq: Any) -> None:
    r = sbdlq("transfer-dlq", "peek", "fwd", "-o", "jsonl")
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["message_id"] for d in docs] == ["x0", "x1", "x2"]
    assert docs[0]["dead_letter_reason"] == "MessagingEntityNotFound"
    r = sbdlq("transfer-dlq", "inspect-reason", "fwd", "-o", "json")
    assert [(g["key"], g["count"]) for g in json.loads(r.stdout)] == [("MessagingEntityNotFound", 3)]
    r = sbdlq("transfer-dlq", "peek", "fwd")
    assert r.stdout.splitlines()[0].strip() == "fwd/$Transfer/$DeadLetterQueue: 3 message(s)"


def test_transfer_dlq_resubmit_and_purge(transfer: Store, sbdlq: Any) -> None:
    r = sbdlq("transfer-dlq", "resubmit", "fwd", "--to", "gone", "--max", "2")
    assert r.exit_code == 0
    assert r.stderr == "sbdlq: plan: resubmit 2 message(s) from fwd/$Transfer/$DeadLetterQueue to gone\n"
    assert [m.message_id for m in transfer.active("gone")] == ["x0", "x1"]
    r = sbdlq("transfer-dlq", "purge", "fwd", "--yes")
    assert elapsed(r.stdout) == "purged 1 of 1 selected message(s) in X.XXs\n"
    assert transfer.dlq("fwd", SubQueue.TRANSFER_DEAD_LETTER) == []
    # The DLQ proper was not touched.
    assert transfer.dlq_ids("fwd") == ["d0"]


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_peek_json_interrupted_is_still_one_document(seed: Store, sbdlq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from sbdlq.operations.browse import LARGE_PAGE, PAGE

    seed.engine.create_queue("q")
    seed.dead_letter("q", LARGE_PAGE + PAGE + 50)
    real_peek = EmulatorBackend.peek
    pages = 0

    async def peek_then_ctrl_c(self: EmulatorBackend, address: Address, start: int, n: int) -> list[Message]:
        nonlocal pages
        pages += 1
        if pages == 3:  # the first page is small until the body sizes are known
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(1)
        return await real_peek(self, address, start, n)

    monkeypatch.setattr(EmulatorBackend, "peek", peek_then_ctrl_c)
    r = sbdlq("peek", "q", "--all", "-o", "json")
    assert r.exit_code == 130
    # The first pages, in a closed array; the exit status says the list is incomplete.
    assert [d["sequence_number"] for d in json.loads(r.stdout)] == list(range(1, LARGE_PAGE + PAGE + 1))


def test_profile_sets_concurrency_and_batch_size(
    orders: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"default_profile: local\nprofiles:\n  local:\n    emulator: {orders.path}\n    concurrency: 1\n")
    sizes: list[int] = []
    real_send = EmulatorBackend.send

    async def record(self: EmulatorBackend, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        sizes.append(len(messages))
        await real_send(self, entity, messages)

    monkeypatch.setattr(EmulatorBackend, "send", record)
    # Sends sized by --concurrency, as on a namespace (the latency makes the emulator behave as
    # one): the emulator's one-transaction moves are sized by the batch instead.
    runner = Cli(orders.path, tmp_path, columns=80)
    env = {"SBDLQ_CONFIG": str(config), "SBDLQ_EMULATOR_LATENCY": "1ms"}
    r = runner.invoke("resubmit", "orders", "--max", "3", env=env)
    assert r.exit_code == 0, r.output
    # --concurrency 1 from the profile: one message per send.
    assert sizes == [1, 1, 1]
    r = runner.invoke("resubmit", "orders", "--concurrency", "8", env=env)
    assert r.exit_code == 0, r.output
    # The option beats the profile: both left go in one send.
    assert sizes == [1, 1, 1, 2]


def test_resubmit_a_subscription_counts_the_copies_other_filters_would_take(orders: Store, sbdlq: Any) -> None:
    """Not every copy fans out: the refusal says how many each other subscription would get."""
    from sbdlq.emulator.engine import Rule

    orders.topic("shop", "billing", rules=None)
    orders.engine.create_subscription("shop", "eu-audit", rules=[Rule("eu", sql="tenant = 'eu'")])
    eu = orders.msgs(2, "e", application_properties={"tenant": "eu"})
    us = orders.msgs(1, "u", application_properties={"tenant": "us"})
    orders.send("shop", [*eu, *us])
    got = orders.engine.receive(Address(EntityPath("shop", "billing")), 10)
    orders.engine.dead_letter(Address(EntityPath("shop", "billing")), [m.lock_token for m in got], "Bad", "x")
    orders.engine.receive(Address(EntityPath("shop", "eu-audit")), 10, mode=_delete())
    r = sbdlq("resubmit", "shop/Subscriptions/billing")
    assert r.exit_code == 2
    assert "would also give copies to its subscription(s) eu-audit (2 of 3)" in r.stderr
    r = sbdlq("resubmit", "shop/Subscriptions/billing", "--where", "tenant = 'us'")
    assert r.exit_code == 0  # no other subscription takes these copies: nothing fans out
    assert [m.message_id for m in orders.active("shop/Subscriptions/billing")] == ["u0"]
    assert orders.active("shop/Subscriptions/eu-audit") == []


def test_peek_in_a_machine_format_lists_every_match_unless_max_is_given(cli: Any, seed: Any) -> None:
    """A script never gets a silently cut list: only the table stops at 20, and says so."""
    seed.queue("big")
    seed.dead_letter("big", 33, reason="X")
    for fmt, count in (("json", lambda out: len(json.loads(out))), ("jsonl", lambda out: len(out.splitlines()))):
        code, out, _ = cli("peek", "big", "--reason", "X", "-o", fmt)
        assert (code, count(out)) == (0, 33)
        code, out, _ = cli("peek", "big", "-o", fmt, "--max", "5")
        assert (code, count(out)) == (0, 5)
    code, out, err = cli("-v", "peek", "big")
    assert code == 0 and len([line for line in out.splitlines() if " X " in f" {line} "]) == 20
    assert "showing the first 20; see more with --from-sequence 21, --max N or --all" in err


def test_machine_formats_never_print_a_bare_nan(cli: Any, seed: Any) -> None:
    """A property may hold NaN or an infinity; JSON has neither, so they are written as strings."""
    from sbdlq.models import OutboundMessage

    seed.queue("odd")
    props = {"ratio": float("nan"), "up": float("inf"), "down": float("-inf"), "fine": 1.5}
    seed.dead_letter("odd", [OutboundMessage(body=b"x", message_id="m", application_properties=props)])

    def strict(text: str) -> Any:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON output"))

    for fmt in ("json", "jsonl"):
        code, out, _ = cli("peek", "odd", "-o", fmt)
        assert code == 0
        doc = strict(out)[0] if fmt == "json" else strict(out.splitlines()[0])
        assert {k: doc["application_properties"][k] for k in props} == {
            "ratio": "NaN",
            "up": "Infinity",
            "down": "-Infinity",
            "fine": 1.5,
        }


def test_timeout_bounds_the_wait_for_a_store_another_process_holds(cli: Any, seed: Any) -> None:
    """`--timeout 1s` waits once for the store's write lock, then fails (exit 6); no retry waits again."""
    import sqlite3

    seed.queue("held")
    seed.dead_letter("held", 2)
    holder = sqlite3.connect(seed.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        code, _, err = cli("--timeout", "1s", "resubmit", "held", "-o", "json")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # Exit 6 when the first write meets the lock, 1 (with the run's summary) when it is the move:
    # either way one wait, said once.
    assert code in (1, 6) and err.count("stayed busy for 1s") == 1, err
    assert len(seed.dlq("held")) == 2  # nothing moved
