"""Hostile selections: a pattern can't make a run hang, and Ctrl-C stops one at once (issue 12 item 12).

Each case runs the real `sbdlq` in a subprocess (a hang must fail the test, not freeze it) on a
store holding a 40-byte body and a 40-character property, the sizes of the original report.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from support import dead_letter_all
from support.process import sbdlq_env, start_sbdlq, wait_for_line

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
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "[]"


def test_catastrophic_body_regex_fails_the_run_with_one_line(store: Path, tmp_path: Path) -> None:
    """A regex that backtracks for minutes hits the time budget: exit 2, one line, nothing moved."""
    proc = _sbdlq(store, tmp_path, "purge", "orders", "--yes", "--body-regex", "(a|aa)+$")
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 2, err
    assert len(lines) == 1 and "--body-regex" in lines[0], lines
    assert "Traceback" not in err
    eng = Engine(store)
    assert eng.counts("orders").dead_letter == 3
    eng.close()


# Long enough that only Ctrl-C can end the scan within the test's wait: the product's budget
# (REGEX_BUDGET_S, 1 s) would otherwise stop it by itself, and the test could not tell who did.
LONG_BUDGET_S = 600.0
#: Printed on stderr by the wrapper below when the scan of a body starts.
SCANNING = "test: scanning a body"

# The console script, with a long regex budget, announcing each body's scan on stderr (an event
# for the test to wait on, instead of guessing how long the start takes on a busy machine).
_SCAN_ANNOUNCED = f"""
import sys
from sbdlq import selection
selection.REGEX_BUDGET_S = {LONG_BUDGET_S}
real_search = selection.BodyRegex.search
def search(self, text, sequence_number=0):
    sys.stderr.write("{SCANNING}\\n")
    sys.stderr.flush()
    return real_search(self, text, sequence_number)
selection.BodyRegex.search = search
sys.argv[0] = "sbdlq"
from sbdlq.entry import main
main()
"""


# `regex` backtracks on the first two for minutes; it answers the third at once (so there the
# signal may land after the run ended, and exit 0 is right).
@pytest.mark.parametrize(
    ("pattern", "statuses"),
    [("(a|aa)+$", {130}), ("(aa|a)+$", {130}), ("(a+)+$", {0, 130})],
    ids=["(a|aa)+$", "(aa|a)+$", "(a+)+$"],
)
def test_ctrl_c_stops_a_body_regex_scan_at_once(store: Path, tmp_path: Path, pattern: str, statuses: set[int]) -> None:
    """Ctrl-C once a body's match started: the run ends on the signal, exit 130, one line.

    No wall-clock bound: the scan's budget is LONG_BUDGET_S, so a run that ignored the signal
    would still be matching when the test's wait (a tenth of it) gives up.
    """
    env = sbdlq_env(store, SBDLQ_CONFIG=str(tmp_path / "none.yaml"))
    proc = start_sbdlq(["peek", "orders", "--body-regex", pattern], env, script=_SCAN_ANNOUNCED)
    try:
        assert proc.stderr is not None
        first = wait_for_line(proc.stderr, timeout=LONG_BUDGET_S / 10)
        assert first == SCANNING + "\n", first
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=LONG_BUDGET_S / 10)
    finally:
        proc.kill()
    assert proc.returncode in statuses, rest
    assert "Traceback" not in rest
    said = [line for line in rest.splitlines() if line != SCANNING]
    if proc.returncode == 130:
        assert len(said) == 1 and said[0].startswith("sbdlq: interrupted"), rest
