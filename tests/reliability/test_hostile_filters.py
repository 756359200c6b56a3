"""Hostile selections: a pattern can't make a run hang, and Ctrl-C stops one at once (issue 12 item 12).

Each case runs the real `sbdlq` in a subprocess (a hang must fail the test, not freeze it) on a
store holding a 40-byte body and a 40-character property, the sizes of the original report.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import dead_letter_all
from support.process import sbdlq_env, start_sbdlq

from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

BODY = b"a" * 39 + b"!"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    eng = Engine(path)
    eng.create_queue("orders")
    messages = [
        OutboundMessage(body=BODY, message_id=f"m-{i}", application_properties={"k": "a" * 40}) for i in range(3)
    ]
    dead_letter_all(eng, "orders", messages, "Bad", "broken")
    eng.close()
    return path


def _sbdlq(store: Path, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return start_sbdlq(list(args), sbdlq_env(store, SBDLQ_CONFIG=str(tmp_path / "none.yaml")))


def test_like_with_many_wildcards_answers_at_once(store: Path, tmp_path: Path) -> None:
    pattern = "%a" * 10 + "%b"
    proc = _sbdlq(store, tmp_path, "peek", "orders", "--where", f"k LIKE '{pattern}'", "-o", "json")
    try:
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "[]"


def test_catastrophic_body_regex_fails_the_run_with_one_line(store: Path, tmp_path: Path) -> None:
    """A regex that backtracks for minutes hits the time budget: exit 2, one line, nothing moved."""
    proc = _sbdlq(store, tmp_path, "purge", "orders", "--yes", "--body-regex", "(a|aa)+$")
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 2, err
    assert len(lines) == 1 and "--body-regex" in lines[0], lines
    assert "Traceback" not in err
    eng = Engine(store)
    assert eng.counts("orders").dead_letter == 3
    eng.close()


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$"])
def test_ctrl_c_stops_a_body_regex_scan_at_once(store: Path, tmp_path: Path, pattern: str) -> None:
    proc = _sbdlq(store, tmp_path, "peek", "orders", "--body-regex", pattern)
    time.sleep(0.8)  # let it start and reach the match (a real Ctrl-C lands at an unknown moment)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert time.monotonic() - sent < 3.0
    assert proc.returncode in (0, 2, 130), err
    assert "Traceback" not in err
