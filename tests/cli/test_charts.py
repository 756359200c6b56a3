"""inspect-reason on a terminal: a bar chart by reason, a gap-free timeline by hour or day."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sbdlq.addresses import parse_address
from sbdlq.cli import reporting
from sbdlq.cli.main import app
from sbdlq.emulator.engine import Engine
from sbdlq.groups import ReasonGroup
from sbdlq.models import OutboundMessage
from sbdlq.operations.browse import timeline

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Dead letters at 08:00 (3), 09:00 (none) and 10:00 (1): the quiet hour must show."""
    path = tmp_path / "store.db"
    now = [T0]
    eng = Engine(path, clock=lambda: now[0])
    eng.create_queue("orders", lock_duration_s=300)
    for at, reason, n in ((T0, "Bad", 3), (T0 + 7200, "Late", 1)):
        now[0] = at
        eng.send("orders", [OutboundMessage(body=b"x") for _ in range(n)])
        got = eng.receive(parse_address("orders"), n)
        eng.dead_letter(parse_address("orders"), [m.lock_token or "" for m in got], reason, "d")
    eng.close()
    monkeypatch.setenv("SBDLQ_EMULATOR", str(path))
    monkeypatch.setenv("SBDLQ_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.setattr(reporting, "chart_wanted", lambda: True)
    return path


def test_timeline_fills_quiet_hours_with_zero() -> None:
    groups = [ReasonGroup("2026-03-01T08:00Z", 3), ReasonGroup("2026-03-01T10:00Z", 1)]
    assert timeline(groups, "hour") == [("2026-03-01T08:00Z", 3), ("2026-03-01T09:00Z", 0), ("2026-03-01T10:00Z", 1)]
    days = [ReasonGroup("2026-02-27", 2), ReasonGroup("2026-03-01", 5)]
    assert timeline(days, "day") == [("2026-02-27", 2), ("2026-02-28", 0), ("2026-03-01", 5)]
    assert timeline([ReasonGroup("Bad", 2)], "reason") == [("Bad", 2)]


def test_timeline_too_long_to_fill_is_left_as_it_is() -> None:
    groups = [ReasonGroup("2020-01-01T00:00Z", 1), ReasonGroup("2026-01-01T00:00Z", 1)]
    assert timeline(groups, "hour") == [("2020-01-01T00:00Z", 1), ("2026-01-01T00:00Z", 1)]


def test_reason_chart_on_a_terminal(store: Path) -> None:
    r = CliRunner().invoke(app, ["inspect-reason", "orders"])
    assert r.exit_code == 0
    chart = r.stdout[r.stdout.index("messages by reason") :].splitlines()
    assert chart == ["messages by reason", "Bad   " + "█" * 40 + " 3", "Late  " + "█" * 13 + " 1"]


def test_hour_timeline_on_a_terminal_shows_the_quiet_hour(store: Path) -> None:
    r = CliRunner().invoke(app, ["inspect-reason", "orders", "--by", "hour"])
    assert r.exit_code == 0
    chart = r.stdout[r.stdout.index("messages per hour") :].splitlines()
    assert chart == [
        "messages per hour (UTC)",
        "2026-03-01T08:00Z  " + "█" * 40 + " 3",
        "2026-03-01T09:00Z   0",
        "2026-03-01T10:00Z  " + "█" * 13 + " 1",
    ]


def test_no_chart_for_a_pipe(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reporting, "chart_wanted", lambda: False)
    r = CliRunner().invoke(app, ["inspect-reason", "orders"])
    assert "█" not in r.stdout
