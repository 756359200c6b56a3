"""Habits from az and gh: output options before the command, `-o none` for cron (issue 26 #9),
and the output formats as one registry (issue 28).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import pytest
from support import Cli, Seeder

from sbdlq.output.formats import FORMATS, OutputFormat


@pytest.fixture
def seeded(seed: Seeder) -> None:
    seed.queue("orders")
    seed.dead_letter("orders", 3, reason="SchemaError")


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize(
    "args",
    [
        ("-o", "json", "count"),
        ("--output", "json", "count"),
        ("--output=json", "count"),
        ("-ojson", "count"),
        ("-o", "json", "--query", "[]", "count"),
    ],
)
def test_output_before_the_command_is_the_commands(cli: Cli, args: tuple[str, ...]) -> None:
    code, out, err = cli(*args)
    assert (code, err) == (0, "")
    assert [c["entity"] for c in json.loads(out)] == ["orders"]


@pytest.mark.usefixtures("seeded")
def test_query_before_a_nested_command(cli: Cli) -> None:
    code, out, _ = cli("-o", "json", "--query", "[].message_id", "transfer-dlq", "peek", "orders")
    assert (code, json.loads(out)) == (0, [])
    code, out, _ = cli("--query", "length(@)", "-o", "json", "peek", "orders")
    assert (code, json.loads(out)) == (0, 3)


def test_output_before_a_command_without_it_is_a_usage_error(cli: Cli) -> None:
    code, _, err = cli("-o", "json", "config", "path")
    assert code == 2
    assert "No such option" in err and "-o" in err


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize(
    "args",
    [
        ("count",),
        ("peek", "orders"),
        ("inspect-reason", "orders"),
        ("inspect-reason",),
        ("purge", "orders", "--dry-run"),
        ("resubmit", "orders", "--dry-run"),
        ("emulator", "list"),
        ("config", "show"),
    ],
)
def test_output_none_writes_nothing_on_stdout(cli: Cli, args: tuple[str, ...]) -> None:
    code, out, _ = cli(*args, "-o", "none")
    assert (code, out) == (0, "")


@pytest.mark.usefixtures("seeded")
def test_output_none_keeps_the_exit_status(cli: Cli) -> None:
    code, out, err = cli("-o", "none", "count", "--fail-above", "2")
    assert (code, out) == (3, "")
    assert "orders: 3 messages" in err


class Shout(OutputFormat):
    """A format a test adds: one entry, nothing else changed."""

    name = shown = "shout"

    def document(self, data: Any, out: IO[str]) -> None:
        out.write("!" + json.dumps(data) + "\n")


@pytest.mark.usefixtures("seeded")
def test_a_new_output_format_is_one_registry_entry(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FORMATS, "shout", Shout())
    code, out, _ = cli("count", "-o", "shout")
    assert (code, out[0], json.loads(out[1:])[0]["entity"]) == (0, "!", "orders")
    code, out, _ = cli("peek", "orders", "-o", "shout")
    assert code == 0
    # Streamed one record at a time: the default item is a one-record document.
    assert [json.loads(line[1:])[0]["dead_letter_reason"] for line in out.splitlines()] == ["SchemaError"] * 3
    code, out, _ = cli("count", "-o", "nope")
    assert code == 2


def test_every_format_is_offered_and_documented() -> None:
    from typing import get_args

    from sbdlq.cli.options import Output

    help_ = get_args(Output)[1].help
    assert all(name in help_ for name in FORMATS)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert f"`table|{'|'.join(list(FORMATS)[1:])}`" in readme


@pytest.mark.parametrize("command", ["peek", "inspect-reason", "resubmit", "purge"])
def test_peek_and_every_selecting_command_take_older_than(cli: Cli, seed: Seeder, command: str) -> None:
    seed.queue("orders")
    seed.dead_letter("orders", 2, reason="SchemaError")
    # Seeded just now: nothing is a day old.
    extra = {"resubmit": ["--dry-run"], "purge": ["--dry-run"]}.get(command, [])
    code, out, _ = cli(command, "orders", "--older-than", "1d", *extra, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert (doc == []) if command in ("peek", "inspect-reason") else (doc["selected"] == 0)
    code, out, _ = cli(command, "orders", "--older-than", "0s", *extra, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert (len(doc) == 2) if command == "peek" else True
