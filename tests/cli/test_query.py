"""--query: a JMESPath expression over the JSON output, as the az CLI has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sbdlq.addresses import parse_address
from sbdlq.cli.main import app
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "store.db"
    eng = Engine(path)
    eng.create_queue("orders")
    eng.create_queue("empty")
    eng.send("orders", [OutboundMessage(body=b"x", message_id=f"m-{i}", subject=f"s{i % 2}") for i in range(5)])
    got = eng.receive(parse_address("orders"), 5)
    eng.dead_letter(parse_address("orders"), [m.lock_token or "" for m in got[:3]], "Bad", "broken")
    eng.dead_letter(parse_address("orders"), [m.lock_token or "" for m in got[3:]], "Late", "too late")
    eng.close()
    monkeypatch.setenv("SBDLQ_EMULATOR", str(path))
    monkeypatch.setenv("SBDLQ_CONFIG", str(tmp_path / "none.yaml"))
    return path


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_count_query_filters_and_projects(store: Path) -> None:
    code, out, _ = run("count", "-o", "json", "--query", "[?dead_letter > `0`].entity")
    assert code == 0
    assert json.loads(out) == ["orders"]


def test_query_with_table_output_renders_the_result(store: Path) -> None:
    code, out, _ = run("count", "--query", "[].{entity: entity, dlq: dead_letter}")
    assert code == 0
    assert out == "entity  dlq\nempty   0\norders  5\n"


def test_query_scalar_in_a_table_is_the_bare_value(store: Path) -> None:
    assert run("peek", "orders", "--all", "--query", "length(@)") == (0, "5\n", "")


def test_peek_json_query_applies_to_the_whole_list(store: Path) -> None:
    code, out, _ = run("peek", "orders", "--all", "-o", "json", "--query", "[?subject=='s0'].message_id")
    assert code == 0
    assert json.loads(out) == ["m-0", "m-2", "m-4"]


def test_peek_jsonl_query_applies_to_each_line(store: Path) -> None:
    code, out, _ = run("peek", "orders", "--all", "-o", "jsonl", "--query", "[sequence_number, dead_letter_reason]")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        [1, "Bad"],
        [2, "Bad"],
        [3, "Bad"],
        [4, "Late"],
        [5, "Late"],
    ]


def test_inspect_reason_and_resubmit_take_queries(store: Path) -> None:
    code, out, _ = run("inspect-reason", "orders", "-o", "json", "--query", "[].[key, count]")
    assert (code, json.loads(out)) == (0, [["Bad", 3], ["Late", 2]])
    code, out, _ = run("resubmit", "orders", "--reason", "late", "--dry-run", "-o", "json", "--query", "selected")
    assert (code, json.loads(out)) == (0, 2)


def test_bad_query_is_one_line_and_exit_2_before_any_work(store: Path) -> None:
    code, out, err = run("purge", "orders", "--yes", "--query", "[?")
    assert code == 2
    assert out == ""
    assert err.splitlines() == ["sbdlq: invalid --query '[?': Invalid jmespath expression: Incomplete expression"]
    assert Engine(store).counts("orders").dead_letter == 5
