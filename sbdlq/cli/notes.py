"""The CLI's own lines on stderr: `err` (errors and warnings, always) and `note` (informational,
only where a person watches or -v asked), secrets masked in both."""

from __future__ import annotations

import click

from sbdlq import terminal


def redact(text: str) -> str:
    """Mask secrets in any text that leaves the process."""
    from sbdlq.connstr import redact as _redact

    return _redact(text)


def err(line: str) -> None:
    """One line on stderr, secrets masked."""
    terminal.env.stderr.write(redact(line) + "\n")
    terminal.env.stderr.flush()


def note(line: str) -> None:
    """An informational line (plan, target, "showing the first N"): the one place that decides.

    It goes to stderr only on a terminal or with -v/--debug, so cron runs stay quiet;
    warnings and errors go through `err`, always.
    """
    ctx = click.get_current_context(silent=True)
    s = ctx.find_root().obj if ctx is not None else None
    # The root's object is the command's `settings.Settings` (None before the app's callback).
    asked = bool(getattr(s, "verbose", False) or getattr(s, "debug", False))
    if asked or terminal.stderr_is_terminal():
        err(line)
