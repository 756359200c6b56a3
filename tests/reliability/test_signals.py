"""SIGTERM and Ctrl-C mid-run: in-flight chunks finish, the rest is released, the summary is printed (issue 12 item 14).

Real `sbdlq` processes, slowed by SBDLQ_EMULATOR_LATENCY so that a move is a send and then a
complete (as on Service Bus), and gated: once some messages moved, the run waits for the signal,
so it lands while messages move however fast or slow the machine is.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from support import dead_lettered_store, stored_ids
from support.process import GATE, GATED, gate_env, sbdlq_env, start_sbdlq, wait_for_line

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine

N = 400
CONCURRENCY = 8
GUARD_S = 60  # a hang guard for each wait on the process, not a speed bound


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """N messages `m-<i>` in the DLQ of `orders`; an empty `retry`."""
    return dead_lettered_store(tmp_path / "store.db", N, "Bad", "broken")


def _run_and_signal(
    store: Path, tmp_path: Path, argv: list[str], signum: int, moved: Path | str
) -> tuple[int, str, str]:
    """Run `argv`, signal it once 2 * CONCURRENCY messages moved (copies in queue `moved`, or
    lines in the file `moved`); its status, stdout and stderr (the gate's line taken out)."""
    env = sbdlq_env(
        store,
        SBDLQ_CONFIG=str(tmp_path / "none.yaml"),
        SBDLQ_EMULATOR_LATENCY="20ms",
        **gate_env(moved, 2 * CONCURRENCY, until="signal"),
    )
    proc = start_sbdlq(argv, env, script=GATED)
    try:
        assert proc.stderr is not None
        before = wait_for_line(proc.stderr, GUARD_S, GATE + "\n")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=GUARD_S)
    finally:
        proc.kill()
    return proc.returncode, out, before.removesuffix(GATE + "\n") + err


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_resubmit_stops_cleanly_on_a_signal(store: Path, tmp_path: Path, signum: int, status: int) -> None:
    argv = ["resubmit", "orders", "--to", "retry", "--batch-size", "20", "--concurrency", str(CONCURRENCY)]
    code, out, err = _run_and_signal(store, tmp_path, argv, signum, "retry")
    assert code == status, err
    assert "Traceback" not in err
    said = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert f"sbdlq: {said}; messages not yet settled stay in their queue" in err
    summary = re.search(r"resubmitted (\d+) of (\d+) selected", out)
    assert summary, f"no summary: {out!r} {err!r}"
    left, copies = stored_ids(store, "orders/$DeadLetterQueue"), stored_ids(store, "retry")
    assert sorted(set(left) | set(copies)) == sorted(f"m-{i}" for i in range(N)), "a message was lost"
    # Chunks in flight finished, so no original is left beside its copy.
    assert not set(left) & set(copies)
    assert 0 < len(copies) < N
    assert int(summary.group(1)) == len(copies)
    # What was not moved is released at once (not left locked until its lock lapses).
    eng = Engine(store)
    assert len(eng.receive(parse_address("orders/$DeadLetterQueue"), N)) == len(left)
    eng.close()


def test_purge_export_stops_cleanly_on_sigterm(store: Path, tmp_path: Path) -> None:
    export = tmp_path / "export.jsonl"
    argv = ["purge", "orders", "--yes", "--batch-size", "5", "--export", str(export), "-o", "json"]
    code, out, err = _run_and_signal(store, tmp_path, argv, signal.SIGTERM, export)
    assert code == 143, err
    assert "sbdlq: terminated (SIGTERM); messages not yet settled stay in their queue" in err
    doc = json.loads(out)
    exported = [json.loads(line)["message_id"] for line in export.read_bytes().splitlines()]
    left = stored_ids(store, "orders/$DeadLetterQueue")
    assert sorted(exported + left) == sorted(f"m-{i}" for i in range(N))
    assert doc["purged"] == len(exported) == doc["exported"]


# The console script's start, with a Ctrl-C landing while the CLI is being imported (on a busy
# machine that takes long enough for an operator's Ctrl-C, or a CI step's SIGINT, to land there).
_CTRL_C_IN_IMPORT = """
import builtins, os, signal, sys
real_import = builtins.__import__
def importing(name, *args, **kwargs):
    if name == "sbdlq.cli.main":
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = importing
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = ["sbdlq", "count", "orders"]
from sbdlq.entry import main
main()
"""


def test_ctrl_c_while_the_cli_is_imported_is_one_line_and_130(store: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _CTRL_C_IN_IMPORT], env=sbdlq_env(store), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "sbdlq: interrupted before anything was done\n"
    assert proc.stdout == ""


def test_a_stopped_run_calls_what_it_never_tried_not_tried(store: Path, tmp_path: Path) -> None:
    """Issue 26 #4: on SIGTERM `resubmitted 600 of 2100 (1500 failed)`; those were never tried."""
    argv = ["resubmit", "orders", "--to", "retry", "--batch-size", "20", "--concurrency", str(CONCURRENCY)]
    code, out, err = _run_and_signal(store, tmp_path, [*argv, "-o", "json"], signal.SIGTERM, "retry")
    assert code == 143, err
    doc = json.loads(out)
    copies = stored_ids(store, "retry")
    assert doc["resubmitted"] == len(copies) < N
    assert doc["failed"] == 0
    assert doc["not_tried"] == N - len(copies) == len(stored_ids(store, "orders/$DeadLetterQueue"))
