"""The real `sbdlq` in a subprocess, for the suites that kill, signal or race it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO


def sbdlq_env(store: Path, **extra: str) -> dict[str, str]:
    """This process's environment with `sbdlq` pointed at the emulator store `store`, plus `extra`."""
    return {**os.environ, "SBDLQ_EMULATOR": str(store), **extra}


#: The start of a `start_sbdlq(script=...)` wrapper that kills itself at a chosen call: TEST_KILL_AT
#: is "moment:n"; the wrapper's hooks call `nth()` at their moment and `die()` when it is the nth.
KILL_PRELUDE = """
import os, signal, sys

moment, at = os.environ["TEST_KILL_AT"].split(":")
at, calls = int(at), []

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def nth():
    calls.append(1)
    return len(calls) == at
"""


def start_sbdlq(
    argv: list[str], env: dict[str, str], *, quiet: bool = False, script: str | None = None
) -> subprocess.Popen[str]:
    """Start `python -m sbdlq argv`: stdin closed, stderr piped, stdout piped (or dropped when `quiet`).

    `script`: Python source run instead of `-m sbdlq` (with argv as sys.argv[1:]); a test's
    wrapper that patches a hook, then calls sbdlq.entry.main.
    """
    start = ["-c", script] if script is not None else ["-m", "sbdlq"]
    return subprocess.Popen(
        [sys.executable, *start, *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if quiet else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_or_kill(argv: list[str], env: dict[str, str], kill_after: float | None) -> int | None:
    """Run `sbdlq` to the end (it must exit 0), or SIGKILL it after `kill_after` s; None when it was killed."""
    proc = start_sbdlq(argv, env, quiet=True)
    if kill_after is None:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        return proc.returncode
    try:
        proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None
    return proc.returncode


def wait_for_line(stream: IO[str], timeout: float, line: str | None = None) -> str:
    """The next line of a child's pipe (or, given `line`, what came up to and including it);
    AssertionError when it did not come within `timeout` s (a hang guard) or the pipe closed."""
    deadline = time.monotonic() + timeout
    seen = ""
    while True:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no line from the process within {timeout:g}s: {seen!r}"
        got = stream.readline()
        seen += got
        if line is None or got == line or not got:
            assert got, f"the process closed its output: {seen!r}"
            return seen


#: Printed on stderr by GATED once enough has moved: from then on the run waits at the gate.
GATE = "test: the run waits at the gate"

# The console script with a gate in the emulator's round trip (needs SBDLQ_EMULATOR_LATENCY, which
# makes each call a round trip). Once TEST_GATE ("queue|ENTITY|N": N active messages in ENTITY, or
# "file|PATH|N": N lines in PATH) says enough has moved, every round trip waits until
# TEST_GATE_UNTIL happens: "signal" (the run's signal handler ran) or "file|PATH" (the test
# created PATH). A test then acts mid-run however fast or slow the machine is, where a
# sleep-and-poll could see a fast run end first; the chunks in flight go on afterwards.
GATED = f"""
import asyncio, os, sys
from pathlib import Path
from sbdlq.backends import emulator as backend
from sbdlq.operations import stopping

kind, where, at_least = os.environ["TEST_GATE"].split("|")
until = os.environ["TEST_GATE_UNTIL"]
handled, closed = [], []
real_on_signal = stopping.Stopper._on_signal
def on_signal(self, signum):
    real_on_signal(self, signum)
    handled.append(signum)
stopping.Stopper._on_signal = on_signal

def moved(engine):
    if kind == "queue":
        return engine.counts(where).active
    return len(Path(where).read_bytes().splitlines()) if Path(where).exists() else 0

def opened():
    return bool(handled) if until == "signal" else Path(until.split("|", 1)[1]).exists()

real_round_trip = backend.EmulatorBackend._round_trip
async def round_trip(self):
    if not closed and moved(self.engine) >= int(at_least):
        closed.append(True)
        sys.stderr.write("{GATE}\\n")
        sys.stderr.flush()
    while closed and not opened():
        await asyncio.sleep(0.01)  # waiting for an event, not for time to pass
    await real_round_trip(self)
backend.EmulatorBackend._round_trip = round_trip
sys.argv[0] = "sbdlq"
from sbdlq.entry import main
main()
"""


def gate_env(moved: Path | str, at_least: int, *, until: Path | str) -> dict[str, str]:
    """The environment for GATED: close once `at_least` moved (lines in the file `moved`, or
    active messages in the entity `moved`); open on the run's signal (`until="signal"`) or
    once the file `until` exists."""
    gate = f"file|{moved}" if isinstance(moved, Path) else f"queue|{moved}"
    return {"TEST_GATE": f"{gate}|{at_least}", "TEST_GATE_UNTIL": until if until == "signal" else f"file|{until}"}
