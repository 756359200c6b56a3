"""The shared tables of `output/report_tables.py` that commands once drew themselves: the plain
columns of `config list` and `config show`, and the header line of each `count --watch` snapshot."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from sbdlq.output.report_tables import plain_table, watch_header


def test_plain_columns_are_aligned_whole_and_never_trail_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    plain_table(
        ["setting", "value", "source"], [["emulator", "/a/long/path/emulator.db", "env"], ["timeout", "30s", ""]]
    )
    assert capsys.readouterr().out == (
        "setting   value                     source\nemulator  /a/long/path/emulator.db  env\ntimeout   30s\n"
    )


def test_a_watch_snapshot_is_headed_by_its_interval_and_utc_second() -> None:
    at = datetime(2026, 11, 29, 2, 30, 15, 999_000, tzinfo=timezone(timedelta(hours=2)))
    assert watch_header("5s", at) == "Every 5s: 2026-11-29T00:30:15Z"
    assert watch_header("5s", at, live=True) == "Every 5s: 2026-11-29T00:30:15Z    (Ctrl-C to stop)"
