"""The terminal seam: the three streams, whether each is a terminal, and the one confirmation.

Every question "is a person there?" is asked here, and nowhere else (tests/test_architecture.py
checks that no other module calls `.isatty()`, reads a console's `is_terminal` or prompts), so a
test stands one in with `terminal.env = terminal.Environment(stdin_is_terminal=True)`.
There are three questions, for three reasons, each one function:

- `stdin_is_terminal`: a person can answer a confirmation;
- `stdout_is_terminal`: a person reads stdout (charts, a redrawn `count --watch`, no bar beside
  the output); `renders_as_terminal`: whether Rich draws a table for a terminal's width, by
  Rich's own rule (TTY_COMPATIBLE and FORCE_COLOR override the stream);
- `stderr_is_terminal`: a person watches stderr, for the notes (a dumb terminal counts); and
  `stderr_can_animate`: it can redraw a progress bar in place (not TERM=dumb).

`confirm` is the one question every command asks, and `must_ask` the one rule before it: with
`--yes` nothing is asked; off a terminal a command that would ask is a usage error (exit 2)
before any I/O; a no is `errors.Declined` (exit 1, DESIGN §4).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from sbdlq.errors import BadInput, Declined, Interrupted


class Environment:
    """The process's streams and whether each is a terminal (httpie's `Environment`).

    The streams are read when asked, never kept: CliRunner swaps them for each invocation.
    An answer given to the constructor stands in for the stream's own (tests).
    """

    def __init__(
        self,
        *,
        stdin_is_terminal: bool | None = None,
        stdout_is_terminal: bool | None = None,
        stderr_is_terminal: bool | None = None,
    ) -> None:
        self._stdin_is_terminal = stdin_is_terminal
        self._stdout_is_terminal = stdout_is_terminal
        self._stderr_is_terminal = stderr_is_terminal

    @property
    def stdin(self) -> TextIO:
        return sys.stdin

    @property
    def stdout(self) -> TextIO:
        return sys.stdout

    @property
    def stderr(self) -> TextIO:
        return sys.stderr

    def stdin_is_terminal(self) -> bool:
        """Whether a person can answer a prompt."""
        return self.stdin.isatty() if self._stdin_is_terminal is None else self._stdin_is_terminal

    def stdout_is_terminal(self) -> bool:
        """Whether a person reads stdout (not a file or a pipe)."""
        return self.stdout.isatty() if self._stdout_is_terminal is None else self._stdout_is_terminal

    def stderr_is_terminal(self) -> bool:
        """Whether a person watches stderr (not cron mail, a log file or a pipe)."""
        return self.stderr.isatty() if self._stderr_is_terminal is None else self._stderr_is_terminal


#: The one environment everything reads; tests replace it (monkeypatch.setattr(terminal, "env", ...)).
env = Environment()


def stdin_is_terminal() -> bool:
    """Whether a person can answer a prompt (stdin is a terminal)."""
    return env.stdin_is_terminal()


def stdout_is_terminal() -> bool:
    """Whether a person reads stdout: charts, a redraw in place and no progress bar beside it."""
    return env.stdout_is_terminal()


def stderr_is_terminal() -> bool:
    """Whether a person is watching stderr (not cron mail, a log file or a pipe): notes go there.

    A dumb terminal counts (it shows lines); whether a progress bar can be drawn is
    `stderr_can_animate`.
    """
    return env.stderr_is_terminal()


def stderr_can_animate() -> bool:
    """Whether stderr is a terminal that can redraw a progress bar in place (not TERM=dumb).

    Stricter than `stderr_is_terminal` (is a person watching, for the notes): a dumb terminal
    is watched but cannot redraw.
    """
    return env.stderr_is_terminal() and os.environ.get("TERM") != "dumb"


def renders_as_terminal(console: Any) -> bool:
    """Whether Rich draws on `console` as on a terminal (its width): Rich's rule, which
    TTY_COMPATIBLE=1|0 and FORCE_COLOR decide before the stream (tests/cli/test_tables.py)."""
    return bool(console.is_terminal)


def must_ask(yes: bool, refusal: BadInput) -> bool:
    """Whether a change must be confirmed: not with --yes; `refusal` (exit 2) when no person can
    answer, raised before any I/O, so that a script without --yes neither changes anything nor waits."""
    if yes:
        return False
    if not stdin_is_terminal():
        raise refusal
    return True


def confirm(question: str, *, declined: str) -> None:
    """Ask `question` on the terminal (default no); a no is `Declined` (exit 1), saying `declined`.

    The one confirmation of every command, so that "the user said no" is one exit status.
    """
    import click
    import typer

    try:
        with _ctrl_c_raises():
            answer = typer.confirm(question, default=False, err=True)
    except click.exceptions.Abort as exc:
        env.stderr.write("\n")  # the line after the question (and the ^C a terminal echoed)
        if isinstance(exc.__context__, KeyboardInterrupt):
            # Nothing is done before the answer (click names a Ctrl-C here "Abort").
            raise Interrupted(f"interrupted; {declined.split('; ', 1)[-1]}") from None
        answer = False  # the end of input: no answer is no
    if not answer:
        raise Declined(declined)


@contextmanager
def _ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt while a question waits, even inside a run whose Stopper
    holds SIGINT (its handler runs on the event loop, which the blocking prompt holds: the
    Ctrl-C waited for Enter)."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
