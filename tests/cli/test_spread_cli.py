"""`resubmit --spread` and `sbdlq spread`: what the operator sees, and where every message is after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import Cli, Seeder


@pytest.fixture
def orders(seed: Seeder) -> Seeder:
    seed.queue("orders")
    seed.dead_letter("orders", 6, prefix="o")
    return seed


def spreads(cli: Cli) -> Path:
    return Path(cli.env["XDG_STATE_HOME"] or "") / "sbdlq" / "spreads"


def test_resubmit_spread_schedules_copies_reports_the_spread_and_count_shows_them(orders: Seeder, cli: Cli) -> None:
    r = cli("resubmit", "orders", "--spread", "1h", "--start-at", "10m", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    spread = doc["spread"]
    assert (doc["resubmitted"], spread["scheduled"], spread["window_s"]) == (6, 6, 3600.0)
    assert [c["message_id"] for c in spread["copies"]] == [f"o{i}" for i in range(6)]
    assert "scheduled evenly over 1h" in r.stderr
    assert (spreads(cli) / f"{spread['id']}.jsonl").is_file()
    (counts,) = cli("count", "orders", "-o", "json").json()
    assert (counts["dead_letter"], counts["active"], counts["scheduled"]) == (0, 0, 6)


def test_resubmit_spread_table_shows_each_copy_and_names_the_spread(orders: Seeder, cli: Cli) -> None:
    r = cli("resubmit", "orders", "--spread", "30m")
    assert r.exit_code == 0, r.stderr
    *table, line = r.stdout.splitlines()
    (header,) = [row.split()[1::2] for row in table if row.startswith("┃")]
    rows = [row.split()[1::2] for row in table if row.startswith("│")]
    # The copies of o0..o5 in sequence order, five minutes apart, each with its sequence number.
    assert header == ["seq", "copy", "at", "message_id"]
    assert [row[3] for row in rows] == [f"o{i}" for i in range(6)]
    assert len({row[1] for row in rows}) == 6
    assert line.startswith("resubmitted 6 of 6 selected message(s) in ")
    (spread_id,) = [p.stem for p in spreads(cli).iterdir()]
    assert f"; spread {spread_id}: 6 copies scheduled from " in line
    assert line.endswith(f"(sbdlq spread status {spread_id})")


def test_a_long_spread_table_shows_twenty_copies_and_names_the_record(seed: Seeder, cli: Cli) -> None:
    seed.queue("orders")
    seed.dead_letter("orders", 25)
    r = cli("resubmit", "orders", "--spread", "1h")
    assert r.exit_code == 0, r.stderr
    (spread_id,) = [p.stem for p in spreads(cli).iterdir()]
    assert f"... and 5 more copies in {spreads(cli) / spread_id}.jsonl" in r.stdout.splitlines()
    assert sum(1 for row in r.stdout.splitlines() if row.startswith("│")) == 20


def test_transfer_dlq_resubmit_spreads_too(seed: Seeder, cli: Cli) -> None:
    seed.transfer_dead_letter("fwd", 3)
    r = cli("transfer-dlq", "resubmit", "fwd", "--spread", "1h", "--start-at", "5m", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["spread"]["scheduled"] == 3
    assert seed.counts("fwd").transfer_dead_letter == 0 and seed.counts("fwd").scheduled == 3


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--spread", "0"], "sbdlq: invalid --spread '0': give a duration from 1s to 31d"),
        (["--start-at", "1h"], "sbdlq: --start-at needs --spread: it starts a spread's window"),
        (
            ["--spread", "1h", "--rate", "5"],
            "sbdlq: --spread and --rate contradict each other: --spread paces the copies itself",
        ),
        (
            ["--spread", "1h", "--start-at", "2001-01-01"],
            "sbdlq: --start-at 2001-01-01 is in the past (give a later time, or leave it out)",
        ),
    ],
)
def test_bad_spread_input_is_one_line_exit_2_and_nothing_moves(
    orders: Seeder, cli: Cli, args: list[str], line: str
) -> None:
    r = cli("resubmit", "orders", *args)
    assert (r.exit_code, r.stderr.splitlines(), r.stdout) == (2, [line], "")
    assert orders.counts("orders").dead_letter == 6
    assert not spreads(cli).exists()


def _spread(cli: Cli, *args: str) -> str:
    r = cli("resubmit", "orders", *args, "-o", "json")
    assert r.exit_code == 0, r.stderr
    return str(r.json()["spread"]["id"])


def test_spread_list_shows_the_spreads_of_this_machine(orders: Seeder, cli: Cli) -> None:
    assert cli("spread", "list", "-o", "json").json() == []
    spread_id = _spread(cli, "--spread", "1h")
    (row,) = cli("spread", "list", "-o", "json").json()
    assert {k: row[k] for k in ("id", "source", "target", "copies", "finished")} == {
        "id": spread_id,
        "source": "orders/$DeadLetterQueue",
        "target": "orders",
        "copies": 6,
        "finished": True,
    }
    table = cli("spread", "list")
    assert table.exit_code == 0 and spread_id in table.stdout


def test_status_and_cancel_halfway_on_a_moved_clock_leave_every_message_once(
    orders: Seeder, cli: Cli, tmp_path: Path
) -> None:
    """Six copies over 60 minutes, one each 10 minutes; 30 minutes later three are active."""
    spread_id = _spread(cli, "--spread", "60m")
    later = {"SBDLQ_EMULATOR_CLOCK_SKEW": "1805s"}
    status = cli("spread", "status", spread_id, "-o", "json", env=later).json()
    assert (status["scheduled"], status["became_active"], status["cancelled"]) == (2, 4, 0)
    held = tmp_path / "held.jsonl"
    r = cli("spread", "cancel", spread_id, "--export", str(held), env=later)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"cancelled 2 scheduled copies of spread {spread_id}, each first put in {held}")
    exported = [json.loads(line)["message_id"] for line in held.read_text().splitlines()]
    assert exported == ["o4", "o5"]
    after = cli("spread", "status", spread_id, "-o", "json", env=later).json()
    assert (after["scheduled"], after["became_active"], after["cancelled"], after["next_release"]) == (0, 4, 2, None)
    # Every message once: active in the queue, or in the file; none scheduled, none twice.
    (counts,) = cli("count", "orders", "-o", "json", env=later).json()
    assert (counts["active"], counts["scheduled"], counts["dead_letter"]) == (4, 0, 0)
    active = orders.peek_ids("orders")
    assert sorted(active + exported) == [f"o{i}" for i in range(6)]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["status", "nope"], "sbdlq: 'nope' is not a spread id (`sbdlq spread list` shows them)"),
        (
            ["status", "20260101T000000Z-abcdef"],
            "sbdlq: no spread 20260101T000000Z-abcdef on this machine (`sbdlq spread list` shows them)",
        ),
        (
            ["cancel", "20260101T000000Z-abcdef"],
            "sbdlq: no spread 20260101T000000Z-abcdef on this machine (`sbdlq spread list` shows them)",
        ),
    ],
)
def test_spread_bad_input_is_one_line_exit_2(orders: Seeder, cli: Cli, args: list[str], line: str) -> None:
    r = cli("spread", *args)
    assert (r.exit_code, r.stderr.splitlines()) == (2, [line])


def test_cancel_without_a_place_is_refused_and_cancels_nothing(orders: Seeder, cli: Cli) -> None:
    spread_id = _spread(cli, "--spread", "1h", "--start-at", "10m")
    r = cli("spread", "cancel", spread_id)
    assert (r.exit_code, r.stderr.splitlines()) == (
        2,
        ["sbdlq: spread cancel needs a place for the copies: --export FILE or --to ENTITY (one)"],
    )
    assert orders.counts("orders").scheduled == 6


def test_replay_spread_schedules_the_records_copies_keyed_by_line(orders: Seeder, cli: Cli, tmp_path: Path) -> None:
    export = tmp_path / "o.jsonl"
    assert cli("purge", "orders", "--yes", "--export", str(export), "-o", "none").exit_code == 0
    r = cli("replay", str(export), "--to", "orders", "--spread", "1h", "--start-at", "5m", "-o", "json")
    assert r.exit_code == 0, r.stderr
    spread = r.json()["spread"]
    assert [c["seq"] for c in spread["copies"]] == [1, 2, 3, 4, 5, 6]  # the lines of the file
    assert [c["message_id"] for c in spread["copies"]] == [f"o{i}" for i in range(6)]
    assert "scheduled evenly over 1h" in r.stderr
    assert orders.counts("orders").scheduled == 6
    (row,) = cli("spread", "list", "-o", "json").json()
    assert (row["source"], row["copies"]) == (str(export), 6)


def test_apply_spread_schedules_a_rules_copies_and_explains_it(orders: Seeder, cli: Cli, tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - name: back slowly\n    entities: [orders]\n    resubmit: {spread: 2h}\n")
    explained = cli("apply", str(policy), "--explain")
    assert "The copies are scheduled evenly over 2h from the run, not sent at once." in explained.stdout
    r = cli("apply", str(policy), "-o", "json")
    assert r.exit_code == 0, r.stderr
    (step,) = r.json()
    spread = step["result"]["spread"]
    assert (spread["scheduled"], spread["window_s"], "copies" in spread) == (6, 7200.0, False)
    counts = orders.counts("orders")
    assert (counts.dead_letter, counts.active + counts.scheduled) == (0, 6)
    orders.dead_letter("orders", 2, prefix="n")
    table = cli("apply", str(policy))
    assert table.exit_code == 0 and "resubmitted 2 of 2, scheduled over 2h (spread " in table.stdout
    rows = cli("spread", "list", "-o", "json").json()
    assert [r["copies"] for r in rows] == [6, 2] and rows[0]["id"] == spread["id"]


def test_apply_refuses_spread_with_rate_at_its_line(orders: Seeder, cli: Cli, tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - name: x\n    entities: [orders]\n    resubmit: {spread: 2h, rate: 5}\n")
    r = cli("apply", str(policy), "--yes")
    assert r.exit_code == 2 and "spread: --spread and --rate contradict each other" in r.stderr
    assert orders.counts("orders").dead_letter == 6


def test_cancel_into_a_file_that_is_not_an_export_is_refused_and_cancels_nothing(
    orders: Seeder, cli: Cli, tmp_path: Path
) -> None:
    spread_id = _spread(cli, "--spread", "1h", "--start-at", "10m")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    r = cli("spread", "cancel", spread_id, "--export", str(notes))
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and "is not an sbdlq JSONL export" in r.stderr, r.stderr
    assert notes.read_text() == "my notes\n"
    assert orders.counts("orders").scheduled == 6


def test_cancel_json_reports_each_number_it_cancelled(orders: Seeder, cli: Cli, tmp_path: Path) -> None:
    spread_id = _spread(cli, "--spread", "1h", "--start-at", "10m")
    r = cli("spread", "cancel", spread_id, "--export", str(tmp_path / "h.jsonl"), "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert (doc["cancelled"], doc["left_due"], doc["not_scheduled"], doc["also_active"]) == (6, 0, 0, [])
    assert len(doc["cancelled_sequences"]) == 6
    assert orders.counts("orders").scheduled == 0
    again = cli("spread", "cancel", spread_id, "--export", str(tmp_path / "h.jsonl"), "-o", "json").json()
    assert (again["cancelled"], again["not_scheduled"]) == (0, 0)


def test_status_table_shows_the_documents_fields_but_finished_and_checked(orders: Seeder, cli: Cli) -> None:
    spread_id = _spread(cli, "--spread", "60m")
    doc = cli("spread", "status", spread_id, "-o", "json").json()
    r = cli("spread", "status", spread_id)
    assert r.exit_code == 0, r.stderr
    fields = [row.split("│")[1].strip() for row in r.stdout.splitlines() if row.startswith("│")]
    assert fields == [key for key in doc if key not in ("finished", "checked")]
    shown = ["id", "target", "start", "end", "recorded", "scheduled", "became_active", "cancelled", "next_release"]
    assert fields == shown
