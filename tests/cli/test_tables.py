"""Tables never cut an identifier, `-o tsv`, and one way to show time (issue 14 items 1 and 9).

Off a terminal (CliRunner's stdout) a table is as wide as its content, whatever COLUMNS says.
On a terminal (TTY_COMPATIBLE=1, as Rich reads it) it fits COLUMNS: optional columns go,
free text is shortened with an ellipsis, and entity paths, reasons, message ids, times and
sequence numbers fold onto more lines instead of being cut.
"""

# The expected tables are wider than a line of code, by design.
# ruff: noqa: E501

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sbdlq.addresses import Address, parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

T0 = 1_735_689_600.0  # 2025-01-01T00:00:00Z
TOPIC = "order-lifecycle-events"
SUBSCRIPTIONS = ["notifications-email", "notifications-push", "notifications-sms", "notifications-webhook"]
SMS = f"{TOPIC}/Subscriptions/notifications-sms"
MESSAGE_ID = "3f2c9a40-7d1e-4b8a-9c55-0e6f1a2b3c4d"
REASON = "SmsProviderRejectedTheRecipientNumber"
DESCRIPTION = "The provider said: invalid number\tcode 21211\nretry later"
# What Rich takes for a terminal (its width then comes from COLUMNS); bold headers are stripped.
TERMINAL = {"TTY_COMPATIBLE": "1", "TERM": "xterm"}
_STYLE = re.compile(r"\x1b\[[0-9;]*m")


def _dead_letter(eng: Engine, entity: str, message: OutboundMessage, reason: str, description: str) -> None:
    path = parse_address(entity).entity
    eng.send(path.name, [message])
    got = eng.receive(Address(path), 1)
    eng.dead_letter(Address(path), [m.lock_token for m in got if m.lock_token], reason, description)


def seed(store: Path) -> None:
    """Queue `orders` and a topic with four long-named subscriptions; one DLQ message in each of two."""
    with Engine(store, clock=lambda: T0) as eng:
        eng.create_queue("orders")
        eng.create_topic(TOPIC)
        for name in SUBSCRIPTIONS:
            eng.create_subscription(TOPIC, name)
        _dead_letter(eng, SMS, OutboundMessage(body=b"sms", message_id=MESSAGE_ID), REASON, DESCRIPTION)
        order = OutboundMessage(body=b'{"id": 1}\tx\ny', message_id="order-1")
        _dead_letter(eng, "orders", order, "Timeout", "took too long")


# ---- tests


@pytest.fixture
def seeded(cli: Any, store: Path) -> Any:
    seed(store)
    return cli


def on_terminal(cli: Any, columns: int, *args: str) -> str:
    """stdout of `sbdlq ARGS` on a terminal COLUMNS wide, styles removed."""
    code, out, err = cli(*args, env={**TERMINAL, "COLUMNS": str(columns)})
    assert (code, err) == (0, "")
    return _STYLE.sub("", out)


def off_terminal(cli: Any, *args: str, columns: int = 80) -> str:
    code, out, err = cli(*args, env={"COLUMNS": str(columns)})
    assert (code, err) == (0, "")
    return out


# ------------------------------------------------------------------ count


COUNT_OFF = (
    "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┓\n"
    "┃ entity                                                     ┃ active ┃ dead_letter ┃ transfer_dead_letter ┃ scheduled ┃\n"
    "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━┩\n"
    "│ order-lifecycle-events/Subscriptions/notifications-email   │      1 │           0 │                    0 │         0 │\n"
    "│ order-lifecycle-events/Subscriptions/notifications-push    │      1 │           0 │                    0 │         0 │\n"
    "│ order-lifecycle-events/Subscriptions/notifications-sms     │      0 │           1 │                    0 │         0 │\n"
    "│ order-lifecycle-events/Subscriptions/notifications-webhook │      1 │           0 │                    0 │         0 │\n"
    "│ orders                                                     │      0 │           1 │                    0 │         0 │\n"
    "└────────────────────────────────────────────────────────────┴────────┴─────────────┴──────────────────────┴───────────┘\n"
)

COUNT_80 = (
    "┏━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┓\n"
    "┃ entity             ┃ active ┃ dead_letter ┃ transfer_dead_letter ┃ scheduled ┃\n"
    "┡━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━┩\n"
    "│ order-lifecycle-ev │      1 │           0 │                    0 │         0 │\n"
    "│ ents/Subscriptions │        │             │                      │           │\n"
    "│ /notifications-ema │        │             │                      │           │\n"
    "│ il                 │        │             │                      │           │\n"
    "│ order-lifecycle-ev │      1 │           0 │                    0 │         0 │\n"
    "│ ents/Subscriptions │        │             │                      │           │\n"
    "│ /notifications-pus │        │             │                      │           │\n"
    "│ h                  │        │             │                      │           │\n"
    "│ order-lifecycle-ev │      0 │           1 │                    0 │         0 │\n"
    "│ ents/Subscriptions │        │             │                      │           │\n"
    "│ /notifications-sms │        │             │                      │           │\n"
    "│ order-lifecycle-ev │      1 │           0 │                    0 │         0 │\n"
    "│ ents/Subscriptions │        │             │                      │           │\n"
    "│ /notifications-web │        │             │                      │           │\n"
    "│ hook               │        │             │                      │           │\n"
    "│ orders             │      0 │           1 │                    0 │         0 │\n"
    "└────────────────────┴────────┴─────────────┴──────────────────────┴───────────┘\n"
)


def test_count_off_a_terminal_is_as_wide_as_its_content(seeded: Any) -> None:
    # COLUMNS=80 is ignored off a terminal: `sbdlq count | grep notifications` finds every row.
    assert off_terminal(seeded, "count", columns=80) == COUNT_OFF
    assert max(len(line) for line in COUNT_OFF.splitlines()) > 80
    grepped = [line for line in COUNT_OFF.splitlines() if "notifications-" in line]
    assert [line.split()[1] for line in grepped] == [f"{TOPIC}/Subscriptions/{s}" for s in SUBSCRIPTIONS]


def test_count_at_80_columns_folds_entity_paths(seeded: Any) -> None:
    out = on_terminal(seeded, 80, "count")
    assert out == COUNT_80
    assert all(len(line) <= 80 for line in out.splitlines())
    # The four subscriptions are four different rows, each path whole once the folds are joined.
    assert "…" not in out


def test_count_at_120_columns_shows_paths_on_one_line(seeded: Any) -> None:
    # The content needs 120 columns: the same table as off a terminal.
    assert on_terminal(seeded, 120, "count") == COUNT_OFF


# ------------------------------------------------------------------ peek


PEEK_OFF = (
    "                                                order-lifecycle-events/Subscriptions/notifications-sms/$DeadLetterQueue: 1 message(s)                                                 \n"
    "┏━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━┓\n"
    "┃ seq ┃ enqueued             ┃ deliveries ┃ reason                                ┃ description                              ┃ subject ┃ message_id                           ┃ body ┃\n"
    "┡━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━┩\n"
    "│   1 │ 2025-01-01T00:00:00Z │          1 │ SmsProviderRejectedTheRecipientNumber │ The provider said: invalid number code … │         │ 3f2c9a40-7d1e-4b8a-9c55-0e6f1a2b3c4d │ sms  │\n"
    "└─────┴──────────────────────┴────────────┴───────────────────────────────────────┴──────────────────────────────────────────┴─────────┴──────────────────────────────────────┴──────┘\n"
)

PEEK_80 = (
    "   order-lifecycle-events/Subscriptions/notifications-sms/$DeadLetterQueue: 1   \n"
    "                                   message(s)                                   \n"
    "┏━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┳━━━━━━┓\n"
    "┃ seq ┃ enqueued             ┃ reason              ┃ message_id         ┃ body ┃\n"
    "┡━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━╇━━━━━━┩\n"
    "│   1 │ 2025-01-01T00:00:00Z │ SmsProviderRejected │ 3f2c9a40-7d1e-4b8a │ sms  │\n"
    "│     │                      │ TheRecipientNumber  │ -9c55-0e6f1a2b3c4d │      │\n"
    "└─────┴──────────────────────┴─────────────────────┴────────────────────┴──────┘\n"
)

PEEK_120 = (
    "               order-lifecycle-events/Subscriptions/notifications-sms/$DeadLetterQueue: 1 message(s)                \n"
    "┏━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━┓\n"
    "┃ seq ┃ enqueued             ┃ reason                                ┃ message_id                           ┃ body ┃\n"
    "┡━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━┩\n"
    "│   1 │ 2025-01-01T00:00:00Z │ SmsProviderRejectedTheRecipientNumber │ 3f2c9a40-7d1e-4b8a-9c55-0e6f1a2b3c4d │ sms  │\n"
    "└─────┴──────────────────────┴───────────────────────────────────────┴──────────────────────────────────────┴──────┘\n"
)


def test_peek_off_a_terminal_shows_reason_and_message_id_whole(seeded: Any) -> None:
    # The description is free text: shortened, visibly.
    assert off_terminal(seeded, "peek", SMS) == PEEK_OFF


def test_peek_at_80_columns_folds_reason_and_message_id(seeded: Any) -> None:
    # Deliveries, description and subject give way; reason and message id fold, never cut.
    assert on_terminal(seeded, 80, "peek", SMS) == PEEK_80


def test_peek_at_120_columns_keeps_reason_and_message_id_on_one_line(seeded: Any) -> None:
    assert on_terminal(seeded, 120, "peek", SMS) == PEEK_120


# ------------------------------------------------------------------ inspect-reason


BY_DESC_OFF = (
    "                                                1 message(s) by description                                                 \n"
    "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┓\n"
    "┃ key                                                      ┃ count ┃ first_enqueued       ┃ last_enqueued        ┃ samples ┃\n"
    "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━┩\n"
    "│ The provider said: invalid number code 21211 retry later │     1 │ 2025-01-01T00:00:00Z │ 2025-01-01T00:00:00Z │ 1       │\n"
    "└──────────────────────────────────────────────────────────┴───────┴──────────────────────┴──────────────────────┴─────────┘\n"
)

BY_DESC_80 = (
    "                          1 message(s) by description                           \n"
    "┏━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┓\n"
    "┃ key          ┃ count ┃ first_enqueued       ┃ last_enqueued        ┃ samples ┃\n"
    "┡━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━┩\n"
    "│ The provider │     1 │ 2025-01-01T00:00:00Z │ 2025-01-01T00:00:00Z │ 1       │\n"
    "│ said:        │       │                      │                      │         │\n"
    "│ invalid      │       │                      │                      │         │\n"
    "│ number code  │       │                      │                      │         │\n"
    "│ 21211 retry  │       │                      │                      │         │\n"
    "│ later        │       │                      │                      │         │\n"
    "└──────────────┴───────┴──────────────────────┴──────────────────────┴─────────┘\n"
)


def test_inspect_reason_by_description_keeps_the_whole_description(seeded: Any) -> None:
    assert off_terminal(seeded, "inspect-reason", SMS, "--by", "description") == BY_DESC_OFF


def test_inspect_reason_at_80_columns_keeps_the_samples(seeded: Any) -> None:
    assert on_terminal(seeded, 80, "inspect-reason", SMS, "--by", "description") == BY_DESC_80


# ------------------------------------------------------------------ -o tsv


def test_count_tsv(seeded: Any) -> None:
    assert seeded("count", "-o", "tsv") == (
        0,
        f"{TOPIC}/Subscriptions/notifications-email\t1\t0\t0\t0\n"
        f"{TOPIC}/Subscriptions/notifications-push\t1\t0\t0\t0\n"
        f"{TOPIC}/Subscriptions/notifications-sms\t0\t1\t0\t0\n"
        f"{TOPIC}/Subscriptions/notifications-webhook\t1\t0\t0\t0\n"
        "orders\t0\t1\t0\t0\n",
        "",
    )


def test_peek_tsv_has_the_table_columns_with_full_escaped_values(seeded: Any) -> None:
    # seq, enqueued, deliveries, reason, description, subject, message_id, body.
    assert seeded("peek", SMS, "-o", "tsv") == (
        0,
        f"1\t2025-01-01T00:00:00Z\t1\t{REASON}\tThe provider said: invalid number\\tcode 21211\\nretry later"
        f"\t\t{MESSAGE_ID}\tsms\n",
        "",
    )
    assert seeded("peek", "orders", "-o", "tsv") == (
        0,
        '1\t2025-01-01T00:00:00Z\t1\tTimeout\ttook too long\t\torder-1\t{"id": 1}\\tx\\ny\n',
        "",
    )


def test_inspect_reason_tsv(seeded: Any) -> None:
    assert seeded("inspect-reason", SMS, "-o", "tsv") == (
        0,
        f"{REASON}\t1\t2025-01-01T00:00:00Z\t2025-01-01T00:00:00Z\t1\n",
        "",
    )


def test_tsv_after_a_query(seeded: Any) -> None:
    assert seeded("count", "-o", "tsv", "--query", "[?dead_letter > `0`].entity") == (0, f"{SMS}\norders\n", "")
    assert seeded("count", "orders", "-o", "tsv", "--query", "[].[entity, dead_letter]") == (0, "orders\t1\n", "")


def test_emulator_list_and_receive_tsv(seeded: Any) -> None:
    code, out, err = seeded("emulator", "list", "-o", "tsv")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"{TOPIC}\ttopic\t\t\t\t\t4"
    assert out.splitlines()[-1] == "orders\tqueue\t0\t1\t0\t0\t"
    assert seeded("emulator", "receive", "orders", "--sub-queue", "deadletter", "--abandon", "-o", "tsv") == (
        0,
        '1\torder-1\t2\t\tTimeout\t{"id": 1}\\tx\\ny\n',
        "abandoned 1 message(s) from orders/$DeadLetterQueue\n",
    )


def test_tsv_in_a_profile(seeded: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"profiles:\n  local:\n    emulator: {seeded.store}\n    output: tsv\n")
    assert seeded.bare("--profile", "local", "count", "orders", env={"SBDLQ_CONFIG": str(config)}) == (
        0,
        "orders\t0\t1\t0\t0\n",
        "",
    )


# ------------------------------------------------------------------ time


def _times(doc: Any) -> list[str]:
    if isinstance(doc, dict):
        return [t for k, v in doc.items() for t in ([v] if k.endswith(("_time", "_enqueued", "_at")) else _times(v))]
    if isinstance(doc, list):
        return [t for v in doc for t in _times(v)]
    return []


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@pytest.mark.parametrize("command", [["peek", SMS], ["inspect-reason", SMS], ["inspect-reason", SMS, "--by", "hour"]])
def test_every_document_shows_time_as_iso_8601_utc_with_z(seeded: Any, fmt: str, command: list[str]) -> None:
    import yaml

    code, out, err = seeded(*command, "-o", fmt)
    assert (code, err) == (0, "")
    doc = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    times = [t for t in _times(doc) if t is not None]
    assert times and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", t) for t in times), times


def test_every_table_shows_time_as_iso_8601_utc_with_z(seeded: Any) -> None:
    for command in (["peek", SMS], ["inspect-reason", SMS]):
        out = off_terminal(seeded, *command)
        assert "2025-01-01T00:00:00Z" in out
        assert "2025-01-01 00:00" not in out
