"""Ctrl-C at each moment of a command's life, in a real `sbdlq` process (issue 38 item 2).

A script must tell "interrupted" from "done" by the exit status alone: 130 only when the
command was stopped; a run that finished exits with its own status, whatever Ctrl-C comes
after. Each test hooks one moment of the real console script and raises a real SIGINT there
(`signal.raise_signal`, handled before the hooked call returns), so the moment is the same
however fast or slow the machine is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import dead_lettered_store, stored_ids
from support.process import sbdlq_env

N = 40
GUARD_S = 120  # a hang guard, not a speed bound

# The console script with a SIGINT raised at TEST_SIGINT_AT ("moment" or "moment*2": twice).
_AT_A_MOMENT = """
import os, signal, sys
import click.termui
from sbdlq import terminal
from sbdlq.cli import error_path, group, reporting
from sbdlq.cli.commands import dlq

moment, _, times = os.environ["TEST_SIGINT_AT"].partition("*")

def ctrl_c():
    for _ in range(int(times or 1)):
        signal.raise_signal(signal.SIGINT)

def after(module, name):
    real = getattr(module, name)
    def hooked(*args, **kwargs):
        result = real(*args, **kwargs)
        ctrl_c()
        return result
    setattr(module, name, hooked)

if moment == "report":  # the run's summary is written: the run is done
    after(reporting, "report")
elif moment == "counted":  # count's work returned, its table not yet drawn
    after(dlq, "guarded")
elif moment == "parse":  # click is parsing the command line
    after(group, "lift_global_options")
elif moment == "settings":  # the command starts: its settings, before any broker call
    after(error_path, "settings")
elif moment == "question":  # the operator is asked to confirm
    terminal.env = terminal.Environment(stdin_is_terminal=True)
    def answer(prompt):
        ctrl_c()
        return "y"
    click.termui.visible_prompt_func = answer
sys.argv[0] = "sbdlq"
from sbdlq.entry import main
main()
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """N messages `m-<i>` in the DLQ of `orders`; an empty `retry`."""
    return dead_lettered_store(tmp_path / "store.db", N, "Bad", "broken")


def _sbdlq(store: Path, moment: str, *argv: str) -> tuple[int, str, str]:
    env = sbdlq_env(store, SBDLQ_CONFIG=str(store.parent / "none.yaml"), TEST_SIGINT_AT=moment)
    proc = subprocess.run(
        [sys.executable, "-c", _AT_A_MOMENT, *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    return proc.returncode, proc.stdout, proc.stderr


RESUBMIT = ("resubmit", "orders", "--to", "retry")


def test_a_ctrl_c_after_the_run_finished_leaves_the_runs_own_status(store: Path) -> None:
    code, out, err = _sbdlq(store, "report", *RESUBMIT)
    assert (code, err) == (0, "")
    assert out.startswith(f"resubmitted {N} of {N} selected message(s) in ")
    assert len(stored_ids(store, "retry")) == N


def test_a_ctrl_c_after_a_count_over_its_threshold_leaves_its_3(store: Path) -> None:
    code, out, err = _sbdlq(store, "counted", "count", "orders", "--fail-above", "5", "-o", "tsv")
    assert (code, out) == (3, f"orders\t0\t{N}\t0\t0\n")
    assert "interrupted" not in err


def test_a_second_ctrl_c_after_the_run_stops_it_at_once(store: Path) -> None:
    code, out, err = _sbdlq(store, "report*2", *RESUBMIT)
    assert (code, err) == (130, "sbdlq: interrupted\n")
    assert out.startswith(f"resubmitted {N} of {N} selected message(s) in ")


@pytest.mark.parametrize("moment", ["parse", "settings"])
def test_a_ctrl_c_during_start_up_says_nothing_was_done_and_exits_130(store: Path, moment: str) -> None:
    assert _sbdlq(store, moment, *RESUBMIT) == (130, "", "sbdlq: interrupted before anything was done\n")
    assert (len(stored_ids(store, "orders/$DeadLetterQueue")), stored_ids(store, "retry")) == (N, [])


def test_a_ctrl_c_at_the_question_deletes_nothing_and_exits_130(store: Path) -> None:
    code, out, err = _sbdlq(store, "question", "purge", "orders")
    assert (code, out) == (130, "")
    # The question went to the hooked prompt; the line after it is sbdlq's one line.
    assert err == "\nsbdlq: interrupted; nothing was deleted\n"
    assert len(stored_ids(store, "orders/$DeadLetterQueue")) == N
