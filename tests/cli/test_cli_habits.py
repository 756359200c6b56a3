"""Habits from az and gh: output options before the command, `-o none` for cron (issue 26 #9),
and the output formats as one registry (issue 28).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any, ClassVar

import pytest
from support import Cli, Seeder
from support.readme import section

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


class Whisper(Shout):
    """A format offered to count by name and refused by inspect-reason in its own words, as prometheus is."""

    name = shown = "whisper"
    offered_by: ClassVar[Mapping[str, str] | None] = {"count": "quietly"}
    refused_by: ClassVar[Mapping[str, tuple[str, str]]] = {"inspect-reason": ("too loud for groups", "use -o json")}


@pytest.mark.usefixtures("seeded")
def test_a_format_some_commands_offer_is_one_entry_too(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from sbdlq.cli.completion import complete_count_output, complete_output

    monkeypatch.setitem(FORMATS, "whisper", Whisper())
    code, out, _ = cli("count", "-o", "whisper")
    assert (code, json.loads(out[1:])[0]["entity"]) == (0, "orders")
    # Offered by name to count only: every other command refuses it as a name it does not offer.
    code, _, err = cli("peek", "orders", "-o", "whisper")
    assert (code, err) == (2, "sbdlq: invalid output format 'whisper' (use table, json, jsonl, yaml, tsv or none)\n")
    code, _, err = cli("inspect-reason", "orders", "-o", "Whisper")
    assert (code, err) == (2, "sbdlq: inspect-reason offers no -o whisper: too loud for groups (use -o json)\n")
    assert "whisper" in complete_count_output(None, "w")  # type: ignore[arg-type]
    assert "whisper" not in complete_output(None, "w")  # type: ignore[arg-type]


def option_help(*path: str) -> str:
    """The `-o` help of a command, as its --help shows it."""
    import typer

    from sbdlq.cli.main import app

    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return next(p.help for p in command.params if "--output" in p.opts)


def test_every_format_is_offered_and_documented() -> None:
    from typing import get_args

    from sbdlq.cli.options import Output
    from sbdlq.output.formats import outputs

    help_ = get_args(Output)[1].help
    everyones = outputs()
    assert "prometheus" not in everyones
    assert all(name in help_ for name in everyones)
    assert f"`table|{'|'.join(everyones[1:])}`" in section("## Output")  # docs/reference.md
    # A format offered by name is in the -o help of each command it names, with that command's words.
    by_name = {name: f.offered_by for name, f in FORMATS.items() if f.offered_by is not None}
    assert set(by_name) == {"prometheus"} and set(by_name["prometheus"]) == {"count", "apply"}
    for name, commands in by_name.items():
        for command, words in commands.items():
            assert f"{name} ({words})" in option_help(command)
    assert option_help("apply").startswith("table, json, jsonl, yaml, none or prometheus")  # tsv: its report is nested


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
