"""`resubmit --spread` and `sbdlq spread`: what the operator sees, and where every message is after."""

from __future__ import annotations

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


def test_resubmit_spread_table_names_the_spread_and_how_to_follow_it(orders: Seeder, cli: Cli) -> None:
    r = cli("resubmit", "orders", "--spread", "30m")
    assert r.exit_code == 0, r.stderr
    (line,) = r.stdout.splitlines()
    assert line.startswith("resubmitted 6 of 6 selected message(s) in ")
    (spread_id,) = [p.stem for p in spreads(cli).iterdir()]
    assert f"; spread {spread_id}: 6 copies scheduled from " in line
    assert line.endswith(f"(sbdlq spread status {spread_id})")


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
