"""The one error path of every command: each error one stderr line and its exit status
(`handled`, `fail`), and `guarded`, which runs a command's async work inside it."""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn, TypeVar

import click
import typer

from sbdlq import interrupts, terminal
from sbdlq.cli.notes import err
from sbdlq.cli.settings import Settings, settings
from sbdlq.errors import ExitStatus, SbdlqError

T = TypeVar("T")


def fail(exc: SbdlqError) -> NoReturn:
    """Say `exc` in one stderr line and exit with its status."""
    err(f"sbdlq: {exc.line()}")
    raise typer.Exit(int(exc.exit_status))


@contextmanager
def handled(ctx: typer.Context) -> Iterator[Settings]:
    """Map every error to one stderr line and its exit status (tracebacks only with --debug)."""
    s = settings(ctx)
    try:
        yield s
    except (typer.Exit, click.exceptions.Exit, click.ClickException):
        raise
    except SbdlqError as exc:
        if s.debug:
            err(traceback.format_exc())
        fail(exc)
    except KeyboardInterrupt:
        err(f"sbdlq: {interrupts.line('interrupted; messages not yet settled stay in their queue')}")
        raise typer.Exit(int(ExitStatus.INTERRUPTED))
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly.
        terminal.env.stderr.close()
        raise typer.Exit(0)
    except Exception as exc:
        if s.debug:
            err(traceback.format_exc())
        err(f"sbdlq: unexpected error: {type(exc).__name__}: {exc} (rerun with --debug for details)")
        raise typer.Exit(int(ExitStatus.FAILED))


def guarded(ctx: typer.Context, work: Callable[[Settings], Awaitable[T]], *, reads_only: bool = False) -> T:
    """Run a command's async `work` with its settings under the one error path; its result.

    Settings → call → map errors: `work` opens the target itself (`target.open_target`).

    `reads_only` work (it starts no tasks and takes no locks) runs without an event loop
    when the target is the in-process emulator: see sbdlq.loopless.
    """
    with handled(ctx) as s:
        if reads_only and _in_process(s):
            from sbdlq.loopless import run_without_loop

            return run_without_loop(_work_between_moments(work, s))
        import asyncio  # here, not at start-up: `--help` and usage errors don't pay for it

        return asyncio.run(_work_between_moments(work, s))
    raise AssertionError("unreachable")


async def _work_between_moments(work: Callable[[Settings], Awaitable[T]], s: Settings) -> T:
    """The work, between the two moments that change what a Ctrl-C means (sbdlq/interrupts.py)."""
    interrupts.begin_work()
    result = await work(s)
    interrupts.work_returned()  # its result stands: a late Ctrl-C no longer turns it into 130
    return result


def _in_process(s: Settings) -> bool:
    """Whether the target answers in this process without waiting (the emulator, no latency)."""
    from sbdlq.backends import emulator_latency

    try:
        return s.target().kind == "emulator" and not emulator_latency()
    except SbdlqError:
        return False  # the work meets the same error in its own order, under asyncio
