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
