"""The terminal seam (sbdlq/terminal.py, issue 39 item 3): what it answers, and what a test stands in."""

from __future__ import annotations

import io
import sys

import pytest

from sbdlq import terminal
from sbdlq.errors import BadInput


class _Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_streams_are_read_when_asked_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # CliRunner swaps sys.stdout for each invocation: the seam must see the stream of the moment.
    env = terminal.Environment()
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert env.stdout is sys.stdout and not env.stdout_is_terminal()
    monkeypatch.setattr(sys, "stdout", _Tty())
    assert env.stdout is sys.stdout and env.stdout_is_terminal()


def test_an_answer_given_stands_in_for_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    monkeypatch.setattr(terminal, "env", terminal.Environment(stdin_is_terminal=True))
    assert terminal.stdin_is_terminal()
    assert not terminal.Environment().stdin_is_terminal()


@pytest.mark.parametrize(("term", "animates"), [("xterm", True), ("dumb", False)])
def test_a_dumb_terminal_is_watched_but_draws_no_bar(
    monkeypatch: pytest.MonkeyPatch, term: str, animates: bool
) -> None:
    monkeypatch.setenv("TERM", term)
    monkeypatch.setattr(sys, "stderr", _Tty())
    assert terminal.Environment().stderr_is_terminal()
    assert terminal.stderr_can_animate() is animates


def test_must_ask_refuses_off_a_terminal_and_never_with_yes(monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = BadInput("purge needs --yes when stdin is not a terminal")
    monkeypatch.setattr(terminal, "env", terminal.Environment(stdin_is_terminal=False))
    assert terminal.must_ask(True, refusal) is False
    with pytest.raises(BadInput) as raised:
        terminal.must_ask(False, refusal)
    assert raised.value is refusal
    monkeypatch.setattr(terminal, "env", terminal.Environment(stdin_is_terminal=True))
    assert terminal.must_ask(False, refusal) is True
