"""Repair while resubmitting, and replay from a file (issue 15, items 1 and 2): exact output, exit codes."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import Cli, Seeder
from support.cli import CliResult

from sbdlq.models import ATTEMPT, RESUBMITTED_FROM


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """The CLI with the elapsed time of summaries written as 0.00s (a loaded machine takes longer)."""

    class Timeless(Cli):
        def __call__(self, *args: str, **kwargs: Any) -> CliResult:
            code, out, err = cli(*args, **kwargs)
            return CliResult(code, re.sub(r" in \d+\.\d\ds\b", " in 0.00s", out), err)

    timeless = Timeless.__new__(Timeless)
    timeless.__dict__.update(cli.__dict__)
    return timeless


@pytest.fixture
def orders(seed: Seeder) -> Seeder:
    """orders' DLQ: m0..m2, subject `old`, tenant=eu, v=1; an empty queue `retry`."""
    seed.queue("orders")
    seed.queue("retry")
    seed.dead_letter("orders", 3, reason="Bad", subject="old", application_properties={"tenant": "eu", "v": 1})
    return seed


# ---------------------------------------------------------------------- repair


def test_resubmit_edits_every_copy(cli: Cli, orders: Seeder) -> None:
    code, out, _err = cli(
        "resubmit",
        "orders",
        "--to",
        "retry",
        "--set-property",
        "tenant=us",
        "--set-property",
        "n=42",
        "--remove-property",
        "v",
        "--set-subject",
        "fixed",
        "--set-ttl",
        "1h",
        "--set-correlation-id",
        "c-1",
        "--set-content-type",
        "application/json",
    )
    assert (code, out) == (0, "resubmitted 3 of 3 selected message(s) in 0.00s\n")
    copies = orders.active("retry")
    assert [m.message_id for m in copies] == ["m0", "m1", "m2"]
    first = copies[0]
    assert (first.subject, first.correlation_id, first.content_type, first.time_to_live_s) == (
        "fixed",
        "c-1",
        "application/json",
        3600.0,
    )
    assert first.application_properties == {
        "tenant": "us",
        "n": 42,
        RESUBMITTED_FROM: "orders/$DeadLetterQueue:1",
        ATTEMPT: 1,
    }


def test_resubmit_dry_run_shows_one_example_before_and_after(cli: Cli, orders: Seeder) -> None:
    code, out, _ = cli(
        "resubmit", "orders", "--to", "retry", "--dry-run", "--set-property", "tenant=us", "--set-subject", ""
    )
    assert code == 0
    assert out.splitlines() == [
        "                      example: the copy of sequence number 1                      ",
        "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓",
        "┃ field                               ┃ before     ┃ after                       ┃",
        "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩",
        '│ subject                             │ "old"      │ (none)                      │',
        '│ property tenant                     │ "eu"       │ "us"                        │',
        '│ property DeadLetterReason           │ "Bad"      │ (absent)                    │',
        '│ property DeadLetterErrorDescription │ "it broke" │ (absent)                    │',
        '│ property sbdlq-resubmitted-from     │ (absent)   │ "orders/$DeadLetterQueue:1" │',
        "│ property sbdlq-attempt              │ (absent)   │ 1                           │",
        "└─────────────────────────────────────┴────────────┴─────────────────────────────┘",
        "dry run: 3 message(s) would be resubmitted",
    ]
    assert orders.active("retry") == []
    code, out, _ = cli("resubmit", "orders", "--to", "retry", "--dry-run", "--set-ttl", "PT5M", "-o", "json")
    example = json.loads(out)["example"]
    assert example["sequence_number"] == 1
    assert (example["before"]["time_to_live_s"], example["after"]["time_to_live_s"]) == (None, 300.0)
    assert example["after"]["application_properties"] == {
        "tenant": "eu",
        "v": 1,
        RESUBMITTED_FROM: "orders/$DeadLetterQueue:1",
        ATTEMPT: 1,
    }


def test_a_dry_run_without_edits_shows_no_example(cli: Cli, orders: Seeder) -> None:
    code, out, _ = cli("resubmit", "orders", "--dry-run", "-o", "json")
    assert code == 0
    assert "example" not in json.loads(out)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--set-property", "bad"], "sbdlq: --set-property 'bad': expected KEY=VALUE"),
        (
            ["--remove-property", "DeadLetterReason"],
            "sbdlq: --remove-property DeadLetterReason: copies drop it anyway (it is kept only with "
            "--keep-dead-letter-properties)",
        ),
        (
            ["--set-property", "k=1", "--remove-property", "k"],
            "sbdlq: --set-property k and --remove-property k: give one or the other",
        ),
        (
            ["--set-property", f"{RESUBMITTED_FROM}=x"],
            f"sbdlq: --set-property {RESUBMITTED_FROM}: sbdlq sets it on every copy (where the copy came from) "
            f"(--remove-property {RESUBMITTED_FROM} leaves it off)",
        ),
        (
            ["--set-property", f"{ATTEMPT}=0"],
            f"sbdlq: --set-property {ATTEMPT}: sbdlq counts it on every copy (the original's count + 1) "
            f"(--remove-property {ATTEMPT} leaves it off)",
        ),
        (
            ["--set-ttl", "soon"],
            "sbdlq: invalid --set-ttl 'soon' (use e.g. 250ms, 30s, 5m, 2h, 3d or ISO 8601 like PT1M)",
        ),
        (["--set-ttl", "0s"], "sbdlq: invalid --set-ttl '0s': give a positive duration"),
    ],
)
def test_bad_edits_exit_2_with_one_line_before_anything_moves(
    cli: Cli, orders: Seeder, args: list[str], line: str
) -> None:
    code, out, err = cli("resubmit", "orders", *args)
    assert (code, out, err.splitlines()) == (2, "", [line])
    assert len(orders.dlq("orders")) == 3


def test_removing_a_dead_letter_property_kept_on_purpose_is_allowed(cli: Cli, orders: Seeder) -> None:
    code, _, _ = cli(
        "transfer-dlq", "resubmit", "orders", "--keep-dead-letter-properties", "--remove-property", "DeadLetterReason"
    )
    assert code == 0  # the transfer DLQ is empty: nothing moves, but the options are accepted
    code, _, _ = cli(
        "resubmit", "orders", "--to", "retry", "--keep-dead-letter-properties", "--remove-property", "DeadLetterReason"
    )
    assert code == 0
    assert orders.active("retry")[0].application_properties == {
        "tenant": "eu",
        "v": 1,
        "DeadLetterErrorDescription": "it broke",
        RESUBMITTED_FROM: "orders/$DeadLetterQueue:1",
        ATTEMPT: 1,
    }


def test_the_routing_check_runs_on_the_edited_copy(cli: Cli, seed: Seeder) -> None:
    from sbdlq.emulator.engine import Rule

    seed.queue("orders")
    seed.topic("t", "s", rules=[Rule("eu", sql="tenant = 'eu'")])
    seed.dead_letter("orders", 2, application_properties={"tenant": "us"})
    code, out, _ = cli("resubmit", "orders", "--to", "t", "-o", "json")
    assert (code, json.loads(out)["unroutable"]) == (1, 2)
    code, out, _ = cli("resubmit", "orders", "--to", "t", "--set-property", "tenant=eu", "-o", "json")
    assert (code, json.loads(out)["resubmitted"]) == (0, 2)
    assert len(seed.active("t/Subscriptions/s")) == 2


# ---------------------------------------------------------------------- replay


@pytest.fixture
def export(cli: Cli, orders: Seeder, tmp_path: Path) -> Path:
    """orders' three DLQ messages, purged into an export file."""
    path = tmp_path / "dlq.jsonl"
    assert cli("purge", "orders", "--yes", "--export", str(path))[0] == 0
    return path


def test_replay_an_export_with_the_copy_rules_and_edits(cli: Cli, orders: Seeder, export: Path) -> None:
    code, out, err = cli("replay", str(export), "--to", "retry", "--set-subject", "again")
    assert (code, out, err) == (
        0,
        "replayed 3 of 3 selected message(s) in 0.00s\n",
        f"sbdlq: plan: replay 3 record(s) from {export} to retry\n",
    )
    copies = orders.active("retry")
    assert [(m.message_id, m.body, m.subject) for m in copies] == [
        ("m0", b"m0", "again"),
        ("m1", b"m1", "again"),
        ("m2", b"m2", "again"),
    ]
    assert copies[2].application_properties == {"tenant": "eu", "v": 1, RESUBMITTED_FROM: "dlq.jsonl:3", ATTEMPT: 1}
    # Finished: the state says so, and a second replay of the same export is refused.
    assert export.with_name("dlq.jsonl.replay-state").read_text().endswith("\n3\nfinished\n")


def test_replay_a_peek_jsonl_file_with_a_selection_as_json(cli: Cli, orders: Seeder, tmp_path: Path) -> None:
    code, out, _ = cli("peek", "orders", "-o", "jsonl")
    path = tmp_path / "peek.jsonl"
    path.write_text(out)
    code, out, _ = cli("replay", str(path), "--to", "retry", "--sequence", "2-", "--max", "1", "-o", "json")
    doc = json.loads(out)
    del doc["elapsed_s"]
    assert (code, doc) == (
        0,
        {
            "selected": 1,
            "replayed": 1,
            "failed": 0,
            "not_tried": 0,
            "unconfirmed": 0,
            "not_matching": 1,
            "skipped": 1,
            "unroutable": 0,
            "held_back": 0,
            "repeated": 0,
            "dry_run": False,
            "sdk_fallbacks": [],
        },
    )
    assert [m.message_id for m in orders.active("retry")] == ["m1"]


def test_replay_reads_stdin_and_a_base64_body(cli: Cli, orders: Seeder) -> None:
    line = {"sequence_number": 7, "message_id": "bin", "body": "AAEC", "body_encoding": "base64"}
    code, out, _ = cli("replay", "-", "--to", "retry", input=json.dumps(line) + "\n\n")
    assert (code, out) == (0, "replayed 1 of 1 selected message(s) in 0.00s\n")
    assert orders.active("retry")[0].body == b"\x00\x01\x02"


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("not json", "not JSON (Expecting value at column 1)"),
        ("[1]", "not a JSON object"),
        ('{"sequence_number": 1}', "body: expected a string"),
        (
            '{"sequence_number": 1, "body": "x", "body_encoding": "hex"}',
            "body_encoding 'hex': expected utf-8 or base64",
        ),
        (
            '{"sequence_number": 1, "body": "x", "enqueued_time": "yesterday"}',
            "enqueued_time: expected an ISO 8601 time",
        ),
        # Lines that passed the check and then killed their chunk's send (a traceback, exit 0):
        *(
            (
                f'{{"sequence_number": 1, "body": "x", "time_to_live_s": {ttl}}}',
                "time_to_live_s: expected a positive number of seconds (at most 10675199 days)",
            )
            for ttl in ("NaN", "Infinity", "1e300")
        ),
        *(
            (
                f'{{"sequence_number": 1, "body": "x", "{field}": "a\\ud800"}}',
                f"{field}: holds a lone surrogate (\\ud800-\\udfff), which is not text",
            )
            for field in ("message_id", "session_id")
        ),
        (
            '{"sequence_number": 1, "body": "x", "application_properties": {"k\\udc00": 1}}',
            "application_properties: holds a lone surrogate (\\ud800-\\udfff), which is not text",
        ),
        (
            '{"sequence_number": 1, "body": "x", "message_id": "' + "m" * 129 + '"}',
            "message_id: 129 characters, past the 128 Service Bus takes",
        ),
        (
            '{"sequence_number": 1, "body": "x", "application_properties": {"n": 9223372036854775808}}',
            "application_properties.n: 9223372036854775808 is past the 64-bit range a property holds",
        ),
        # Pathological lines (issue 34, item 8): each one line naming it, never an unexpected error.
        *(
            (deep, "nested too deeply to be a record (objects and arrays inside each other)")
            for deep in (
                "[" * 100_000 + "]" * 100_000,
                '{"sequence_number": 1, "body": "x", "application_properties": {"a": '
                + "[" * 50_000
                + "]" * 50_000
                + "}}",
            )
        ),
        (
            '{"sequence_number": 1, "body": "x", "application_properties": {"a": [[1]]}}',
            "application_properties.a: expected a string, number, boolean or null",
        ),
        (
            '{"sequence_number": ' + "9" * 5000 + ', "body": "x"}',
            "a number of 5,000 digits, past the 64 bits any record field holds",
        ),
        (
            '{"sequence_number": 9223372036854775808, "body": "x"}',
            "sequence_number: expected a whole number (64 bits, not negative)",
        ),
        (
            '{"sequence_number": 1, "delivery_count": -1, "body": "x"}',
            "delivery_count: expected a whole number (32 bits, not negative)",
        ),
        (
            '{"sequence_number": 1e999, "body": "x"}',
            "sequence_number: expected a whole number (64 bits, not negative)",
        ),
        (
            '{"sequence_number": NaN, "body": "x"}',
            "sequence_number: expected a whole number (64 bits, not negative)",
        ),
    ],
)
def test_a_bad_line_refuses_the_whole_replay_naming_its_number(
    cli: Cli, orders: Seeder, export: Path, bad: str, why: str
) -> None:
    with export.open("a") as f:
        f.write(bad + "\n")
    code, out, err = cli("replay", str(export), "--to", "retry")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"sbdlq: {export} line 4: {why} (each line must be one message as `purge --export` or `peek -o jsonl` "
        "writes it)"
    ]
    assert orders.active("retry") == []  # validated before anything was sent


def test_a_leftover_state_needs_resume(cli: Cli, orders: Seeder, export: Path) -> None:
    state = export.with_name("dlq.jsonl.replay-state")
    import hashlib

    digest = hashlib.sha256(export.read_bytes()).hexdigest()
    state.write_text(f"sbdlq-replay-state 1 sha256={digest}\n1\n2\n")
    code, _, err = cli("replay", str(export), "--to", "retry")
    assert (code, err.splitlines()) == (
        2,
        [
            f"sbdlq: {state} exists: an earlier replay of this input did not finish (add --resume to send only the "
            "lines it did not, or delete the file to replay everything)"
        ],
    )
    code, out, err = cli("replay", str(export), "--to", "retry", "--resume")
    assert (code, out) == (0, "replayed 1 of 1 selected message(s) in 0.00s\n")
    assert "2 line(s) already replayed by an earlier run are skipped (--resume)" in err
    assert [m.message_id for m in orders.active("retry")] == ["m2"]
    assert state.read_text().endswith("\n3\nfinished\n")


def test_resume_refuses_a_state_of_other_content(cli: Cli, orders: Seeder, export: Path) -> None:
    state = export.with_name("dlq.jsonl.replay-state")
    state.write_text("sbdlq-replay-state 1 sha256=00\n1\n")
    code, _, err = cli("replay", str(export), "--to", "retry", "--resume")
    assert (code, err.splitlines()) == (
        2,
        [
            f"sbdlq: {state} records a replay of different content: the input changed since (delete it to replay "
            "the whole input again)"
        ],
    )


def test_resume_from_stdin_needs_a_state_file(cli: Cli, orders: Seeder, export: Path) -> None:
    code, _, err = cli("replay", "-", "--to", "retry", "--resume", input=export.read_text())
    assert (code, err.splitlines()) == (2, ["sbdlq: --resume needs --state FILE when the records come from stdin"])


def test_replay_refuses_duplicate_detection_and_unroutable_copies(cli: Cli, seed: Seeder, tmp_path: Path) -> None:
    from sbdlq.emulator.engine import Rule

    seed.queue("dd", requires_duplicate_detection=True)
    seed.topic("t", "s", rules=[Rule("eu", sql="tenant = 'eu'")])
    path = tmp_path / "r.jsonl"
    lines = [{"sequence_number": i, "body": "x", "application_properties": {"tenant": t}} for i, t in enumerate("ab")]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, _, err = cli("replay", str(path), "--to", "dd")
    assert (code, err.splitlines()) == (
        2,
        [
            "sbdlq: dd has duplicate detection: copies that keep their message id may be dropped by the broker "
            "unseen (rerun with --new-message-id)"
        ],
    )
    code, out, err = cli("replay", str(path), "--to", "t", "--set-property", "tenant=eu", "--max", "1")
    assert (code, out) == (0, "replayed 1 of 1 selected message(s) in 0.00s\n")
    path.with_name("r.jsonl.replay-state").unlink()  # finished: replaying again is the operator's call
    code, out, err = cli("replay", str(path), "--to", "t")
    assert code == 1
    assert out == "replayed 0 of 2 selected message(s) in 0.00s (2 unroutable)\n"
    assert err.splitlines()[-1] == (
        "sbdlq: records no subscription of topic t would take were not sent; 2 record(s) were not replayed; "
        "fix the cause and rerun with --resume to send only those"
    )


def test_a_finished_replay_is_not_sent_again(cli: Cli, orders: Seeder, export: Path) -> None:
    state = export.with_name("dlq.jsonl.replay-state")
    assert cli("replay", str(export), "--to", "retry")[0] == 0
    code, out, err = cli("replay", str(export), "--to", "retry", "--resume")
    assert (code, out) == (0, "replayed 0 of 0 selected message(s) in 0.00s\n")
    assert f"sbdlq: note: {state} records a replay of this input that finished: nothing to send (--resume)" in err
    code, _, err = cli("replay", str(export), "--to", "retry")
    assert (code, err.splitlines()) == (
        2,
        [f"sbdlq: {state} records a replay of this input that finished (delete the file to replay everything again)"],
    )
    assert [m.message_id for m in orders.active("retry")] == ["m0", "m1", "m2"]  # each sent once


def _foreign_state(kind: str, path: Path, export: Path) -> None:
    if kind == "a file that is no state":
        path.write_text("my notes, not sbdlq's\n")
    elif kind == "the state of another input":
        path.write_text("sbdlq-replay-state 1 sha256=" + "0" * 64 + "\n1\nfinished\n")
    else:  # a FIFO stands in for a device node (never /dev/null itself: the test may run as root)
        os.mkfifo(path)


@pytest.mark.parametrize("kind", ["a file that is no state", "the state of another input", "a fifo"])
@pytest.mark.parametrize("selects", [["--reason", "NoSuchReason"], []], ids=["selects nothing", "selects all"])
def test_a_state_file_that_is_not_this_inputs_is_refused_and_kept(
    cli: Cli, orders: Seeder, export: Path, tmp_path: Path, kind: str, selects: list[str]
) -> None:
    state = tmp_path / "state"
    _foreign_state(kind, state, export)
    before = state.read_bytes() if state.is_file() else None
    code, out, err = cli("replay", str(export), "--to", "retry", "--resume", "--state", str(state), *selects)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and str(state) in err
    assert state.exists() or state.is_fifo()
    assert (state.read_bytes() if state.is_file() else None) == before
    assert orders.active("retry") == []


def test_a_full_disk_under_the_state_counts_the_sent_chunk_as_sent(
    cli: Cli, orders: Seeder, export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.faults import disk_full_for_replay_state

    disk_full_for_replay_state(monkeypatch, after=0)
    code, out, err = cli("replay", str(export), "--to", "retry", "--concurrency", "2")
    assert code == 1
    assert out.startswith("replayed 2 of 3 selected message(s)")  # the first chunk was sent, then the run stopped
    assert "2 record(s) were sent but not recorded, so a --resume would send them again" in err
    assert [m.message_id for m in orders.active("retry")] == ["m0", "m1"]


def _before_the_second_send(monkeypatch: pytest.MonkeyPatch, act: Callable[[], Any]) -> None:
    """Run `act` just before replay's second chunk is sent (through the real sender)."""
    from sbdlq.operations import sending

    calls = 0
    real_send = sending.CopySender.send

    async def send(self: Any, records: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            act()
        return await real_send(self, records, **kwargs)

    monkeypatch.setattr(sending.CopySender, "send", send)


def test_an_unexpected_error_in_a_send_is_counted_not_lost_in_a_task(
    cli: Cli, orders: Seeder, export: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No chunk's exception is left unretrieved: the run stops, says why, and its figures add up."""

    def boom() -> None:
        raise RuntimeError("boom")

    _before_the_second_send(monkeypatch, boom)
    code, out, err = cli("replay", str(export), "--to", "retry", "--concurrency", "2", "-o", "json")
    doc = json.loads(out)
    assert code == 1
    assert (doc["selected"], doc["replayed"], doc["failed"]) == (3, 2, 1)
    assert "unexpected error sending records: RuntimeError: boom" in err
    assert "Task exception was never retrieved" not in err + caplog.text


@pytest.mark.parametrize(
    "args",
    [["emulator", "send", "retry", "--body", "x", "--property"], ["resubmit", "orders", "--set-property"]],
    ids=["emulator send --property", "resubmit --set-property"],
)
def test_an_integer_property_past_64_bits_is_refused_at_the_edge(cli: Cli, orders: Seeder, args: list[str]) -> None:
    code, out, err = cli(*args, "n=9223372036854775808")
    assert (code, out) == (2, "")
    assert err.startswith("sbdlq: ") and "9223372036854775808 is past the 64-bit range" in err
    assert orders.active("retry") == [] and len(orders.dlq("orders")) == 3  # nothing sent, nothing moved


def test_an_input_rewritten_during_the_replay_stops_it_honestly(
    cli: Cli, orders: Seeder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`jq ... > file` run again while the replay reads it: the run stops, exit 1, and its figures
    add up (it ended `replayed 192 of 1000, failed 0`, exit 0)."""
    path = tmp_path / "big.jsonl"
    lines = [json.dumps({"sequence_number": i + 1, "message_id": f"r{i}", "body": "x"}) for i in range(300)]
    path.write_text("\n".join(lines) + "\n")
    # Rewritten, shorter, in place:
    _before_the_second_send(monkeypatch, lambda: path.write_text("\n".join(lines[:50]) + "\n"))
    code, out, err = cli("replay", str(path), "--to", "retry", "--concurrency", "10", "-o", "json")
    doc = json.loads(out)
    assert code == 1
    assert f"{path} changed while it was replayed: stopped" in err
    assert doc["selected"] == 300 and doc["replayed"] < 300
    assert doc["replayed"] + doc["failed"] + doc["not_tried"] == 300
    assert len(orders.active("retry")) == doc["replayed"]


def test_a_line_longer_than_any_record_is_refused_without_holding_it(
    cli: Cli, orders: Seeder, export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines are read at most LINE_MAX_BYTES at a time (here made small): a huge line is refused
    by its number before it is ever held whole."""
    from sbdlq.operations import records

    monkeypatch.setattr(records, "LINE_MAX_BYTES", 1024)
    with export.open("a") as f:
        f.write(json.dumps({"sequence_number": 9, "body": "x" * 4096}) + "\n")
    code, out, err = cli("replay", str(export), "--to", "retry")
    assert (code, out) == (2, "")
    assert err.startswith(f"sbdlq: {export} line 4: longer than 1,024 bytes")
    assert orders.active("retry") == []


def test_the_resubmitted_from_property_can_be_left_off(cli: Cli, orders: Seeder) -> None:
    code, _, err = cli("resubmit", "orders", "--to", "retry", "--remove-property", RESUBMITTED_FROM)
    assert code == 0, err
    copies = orders.active("retry")
    assert len(copies) == 3 and all(RESUBMITTED_FROM not in m.application_properties for m in copies)
    assert all(m.application_properties == {"tenant": "eu", "v": 1, ATTEMPT: 1} for m in copies)


def _rewrite(path: Path, docs: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))


def test_a_record_never_marked_deleted_is_held_back_until_asked(cli: Cli, orders: Seeder, export: Path) -> None:
    """Issue 34 item 5: a purge stopped between export and delete leaves its records marked 0; replay
    sends the others, names the held-back ones, exits 1, and sends them only when asked."""
    docs = [json.loads(line) for line in export.read_text().splitlines()]
    assert [d["sbdlq_deleted"] for d in docs] == [1, 1, 1]
    docs[1]["sbdlq_deleted"] = 0
    _rewrite(export, docs)
    code, out, err = cli("replay", str(export), "--to", "retry")
    assert (code, out) == (1, "replayed 2 of 2 selected message(s) in 0.00s (1 held back: delete not confirmed)\n")
    assert err.splitlines()[1:] == [
        "sbdlq: 1 record(s) were not sent: the purge that exported them did not confirm their delete, so they "
        f"may still be in the DLQ (sequence numbers {docs[1]['sequence_number']}); check it (`sbdlq peek ENTITY "
        "--sequence ...`); to send them, rerun with --resume --include-held-back"
    ]
    assert [m.message_id for m in orders.active("retry")] == ["m0", "m2"]
    code, out, _ = cli("replay", str(export), "--to", "retry", "--resume", "--include-held-back")
    assert (code, out) == (0, "replayed 1 of 1 selected message(s) in 0.00s\n")
    assert sorted(m.message_id for m in orders.active("retry")) == ["m0", "m1", "m2"]


def test_a_record_exported_again_later_is_sent_once(cli: Cli, orders: Seeder, export: Path) -> None:
    """A rerun of a stopped purge exports again what stayed: the earlier record (marked 0) is dropped,
    the later one sent; a record marked 0 that nothing repeats is held back."""
    m0, m1, m2 = (json.loads(line) for line in export.read_text().splitlines())
    _rewrite(export, [{**m0, "sbdlq_deleted": 0}, {**m1, "sbdlq_deleted": 0}, m0, m2])
    code, out, _ = cli("replay", str(export), "--to", "retry", "-o", "json")
    doc = json.loads(out)
    assert code == 1
    assert {k: doc[k] for k in ("selected", "replayed", "held_back", "repeated", "failed")} == {
        "selected": 2,
        "replayed": 2,
        "held_back": 1,
        "repeated": 1,
        "failed": 0,
    }
    assert [m.message_id for m in orders.active("retry")] == ["m0", "m2"]


def test_a_delete_mark_no_export_writes_is_a_bad_line(cli: Cli, orders: Seeder, export: Path) -> None:
    with export.open("a") as f:
        f.write('{"sequence_number": 9, "body": "x", "sbdlq_deleted": 2}\n')
    code, _, err = cli("replay", str(export), "--to", "retry")
    assert code == 2
    assert err.startswith(f"sbdlq: {export} line 4: sbdlq_deleted: expected 0 or 1 ")


def test_a_last_record_a_killed_purge_cut_short_is_noted_not_sent(cli: Cli, orders: Seeder, export: Path) -> None:
    """A kill inside the export's write leaves a torn last line; that message was never deleted."""
    torn = b'{"sequence_number": 9, "message_id": "m9", "enq'
    with export.open("ab") as f:
        f.write(torn)
    code, out, err = cli("replay", str(export), "--to", "retry")
    assert (code, out) == (0, "replayed 3 of 3 selected message(s) in 0.00s\n")
    assert (
        f"sbdlq: note: {export} line 4 is a record cut short (a purge --export killed while writing it, before "
        "its delete: that message is still in the DLQ); not sent"
    ) in err.splitlines()
    assert [m.message_id for m in orders.active("retry")] == ["m0", "m1", "m2"]


@pytest.mark.parametrize(
    "tail",
    [
        b"garbage",
        b'{"sequence_number": 9, "body": "x"}\n{"a',
        b'{"sequence_number": 9, "body": "x", "application_properties": {"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}",
    ],
    ids=["not a record", "a cut line that is not the start of a record", "nested too deep, no newline"],
)
def test_a_cut_line_that_is_no_record_is_still_a_bad_line(cli: Cli, orders: Seeder, export: Path, tail: bytes) -> None:
    with export.open("ab") as f:
        f.write(tail)
    code, _, err = cli("replay", str(export), "--to", "retry")
    assert code == 2
    assert err.startswith(f"sbdlq: {export} line ")
