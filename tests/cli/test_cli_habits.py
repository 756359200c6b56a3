"""Habits from az and gh: output options before the command, `-o none` for cron (issue 26 #9)."""

from __future__ import annotations

import json

import pytest
from support import Cli, Seeder


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
