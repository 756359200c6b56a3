"""What every command shares: settings from the global options, and the one error path."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import click
import typer

from sbdlq import interrupts
from sbdlq.errors import BadInput, Declined, ExitStatus, Interrupted, SbdlqError
from sbdlq.profiles import Setting, Source, Target, resolve_target
from sbdlq.sdk_shortcut_mode import SDK_SHORTCUTS_ENV

T = TypeVar("T")


def redact(text: str) -> str:
    """Mask secrets in any text that leaves the process."""
    from sbdlq.connstr import redact as _redact

    return _redact(text)


def err(line: str) -> None:
    """One line on stderr, secrets masked."""
    sys.stderr.write(redact(line) + "\n")
    sys.stderr.flush()


def stderr_is_terminal() -> bool:
    """Whether a person is watching stderr (not cron mail, a log file or a pipe): notes go there.

    A dumb terminal counts (it shows lines); whether a progress bar can be drawn is
    `render.stderr_can_animate`.
    """
    return sys.stderr.isatty()


def stdin_is_terminal() -> bool:
    """Whether a person can answer a prompt (stdin is a terminal); tests stand one in here."""
    return sys.stdin.isatty()


def confirm(question: str, *, declined: str) -> None:
    """Ask `question` on the terminal (default no); a no is `Declined` (exit 1), saying `declined`.

    The one confirmation of every command, so that "the user said no" is one exit status.
    """
    try:
        with _ctrl_c_raises():
            answer = typer.confirm(question, default=False, err=True)
    except click.exceptions.Abort as exc:
        sys.stderr.write("\n")  # the line after the question (and the ^C a terminal echoed)
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


def note(line: str) -> None:
    """An informational line (plan, target, "showing the first N"): the one place that decides.

    It goes to stderr only on a terminal or with -v/--debug, so cron runs stay quiet;
    warnings and errors go through `err`, always.
    """
    ctx = click.get_current_context(silent=True)
    s = ctx.find_root().obj if ctx is not None else None
    asked = isinstance(s, Settings) and (s.verbose or s.debug)
    if asked or stderr_is_terminal():
        err(line)


def given_setting(ctx: click.Context, name: str) -> Setting:
    """A global option's value with where it came from: the command line, the environment or its default."""
    from click.core import ParameterSource

    src = ctx.get_parameter_source(name)
    if src is ParameterSource.COMMANDLINE:
        return Setting(ctx.params[name], Source.OPTION)
    if src is ParameterSource.ENVIRONMENT:
        return Setting(ctx.params[name], Source.ENV)
    return Setting(ctx.params[name], Source.DEFAULT)


@dataclass
class Settings:
    """The global options, resolved lazily so `--help` reads no config."""

    options: dict[str, Setting] = field(default_factory=dict)
    profile: str | None = None
    timeout: str = "30s"
    verbose: bool = False
    debug: bool = False
    _target: Target | None = None

    @property
    def timeout_s(self) -> float:
        from sbdlq.timeparse import parse_duration

        prof = self.target().profile
        raw = self.timeout
        given = self.options.get("timeout", Setting(None)).source
        if given is Source.DEFAULT and prof and prof.option("timeout"):
            raw = str(prof.option("timeout"))
        seconds = parse_duration(raw, what="--timeout")
        if seconds <= 0:
            raise BadInput("--timeout must be positive")
        return seconds

    def target(self) -> Target:
        if self._target is None:
            self._target = resolve_target(options=self.options, profile_name=self.profile, warn=err)
            if self._target.level is Source.DEFAULT:
                note(f"sbdlq: using the local emulator at {self._target.value} (no target configured)")
            self.log(f"target: {self._target.describe()}")
        return self._target

    def network(self) -> Any:
        """The transport and proxy (sbdlq.network.Network): option > env > profile > default.

        An explicit `--proxy` without a transport chosen anywhere means websockets, as the SDK
        itself decides for a proxy; HTTPS_PROXY alone does not switch (it serves the admin client).
        """
        from sbdlq.network import Network, check_transport, parse_proxy

        prof = self.target().profile
        transport, t_src = self.options.get("transport", Setting(None))
        proxy, p_src = self.options.get("proxy", Setting(None))
        t_where = "--transport" if t_src is Source.OPTION else "SBDLQ_TRANSPORT"
        p_where = "--proxy" if p_src is Source.OPTION else "HTTPS_PROXY"
        if not transport and prof is not None and prof.option("transport"):
            transport, t_where = prof.option("transport"), f"profile {prof.name}"
        if not proxy and prof is not None and prof.option("proxy"):
            proxy, p_where, p_src = prof.option("proxy"), f"profile {prof.name}", Source.PROFILE
        if not transport:
            transport = "websockets" if proxy and p_src in (Source.OPTION, Source.PROFILE) else "amqp"
        return Network(check_transport(transport, t_where), parse_proxy(proxy, p_where) if proxy else None)

    def profile_default(self, key: str) -> Any:
        prof = self.target().profile
        return prof.option(key) if prof else None

    def log(self, text: str) -> None:
        if self.verbose or self.debug:
            err(f"sbdlq: {text}")


def settings(ctx: typer.Context) -> Settings:
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = Settings()
    return root.obj


def fail(exc: SbdlqError) -> NoReturn:
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
        sys.stderr.close()
        raise typer.Exit(0)
    except Exception as exc:
        if s.debug:
            err(traceback.format_exc())
        err(f"sbdlq: unexpected error: {type(exc).__name__}: {exc} (rerun with --debug for details)")
        raise typer.Exit(int(ExitStatus.FAILED))


def run(ctx: typer.Context, work: Callable[[Settings], Awaitable[T]], *, reads_only: bool = False) -> T:
    """Open → call → map errors: run an async operation under the error path.

    `reads_only` work (it starts no tasks and takes no locks) runs without an event loop
    when the target is the in-process emulator: see sbdlq.run_inline.
    """
    with handled(ctx) as s:
        if reads_only and _in_process(s):
            from sbdlq.run_inline import run_without_loop

            return run_without_loop(_run(work, s))
        import asyncio  # here, not at start-up: `--help` and usage errors don't pay for it

        return asyncio.run(_run(work, s))
    raise AssertionError("unreachable")


async def _run(work: Callable[[Settings], Awaitable[T]], s: Settings) -> T:
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


def open_target(s: Settings, *, create: bool = False) -> Any:
    """The backend for the resolved target (an async context manager)."""
    from sbdlq.backends import open_backend

    target = s.target()
    if not s.debug and (target.kind != "emulator" or "asyncio" in sys.modules):
        # The in-process emulator read without an event loop (sbdlq/run_inline.py) loads neither
        # the SDK nor asyncio, so nothing could log: `count` starts without the logging module.
        quiet_foreign_loggers()
    network = s.network() if target.kind != "emulator" else None
    if network is not None:
        s.log(f"network: {network.describe(_endpoint_port(target))}")
    # SBDLQ_SDK_SHORTCUTS is read by the backend itself; a profile's sdk_shortcuts stands in for it.
    shortcuts = None if os.environ.get(SDK_SHORTCUTS_ENV) else s.profile_default("sdk_shortcuts")
    backend = open_backend(
        target, timeout_s=s.timeout_s, verbose=s.log, create=create, network=network, sdk_shortcuts=shortcuts
    )
    if backend.description:
        s.log(f"backend: {backend.description}")
    return backend


#: Loggers of the libraries under a run: the SDK (its AMQP stack is `azure.servicebus._pyamqp`),
#: uamqp where the SDK uses it, and asyncio, which logs `socket.send() raised exception.` for
#: writes on a cut connection and "Task exception was never retrieved".
FOREIGN_LOGGERS = ("azure", "uamqp", "asyncio")


def quiet_foreign_loggers() -> None:
    """Keep the libraries' log lines off stderr (--debug shows them): sbdlq's stderr is its own,
    one line per event in its words, and the run's summary says what a cut or a stall cost."""
    import logging

    for name in FOREIGN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        logger.propagate = False


def _endpoint_port(target: Any) -> int | None:
    """The AMQP port a connection string names for an emulator (UseDevelopmentEmulator), else None."""
    if target.kind != "connection_string":
        return None
    from sbdlq.connstr import parse_connection_string

    info = parse_connection_string(target.value)
    return (info.port or 5672) if info.use_emulator else info.port


def output_format(s: Settings, given: str | None) -> str:
    """-o, else the profile's output, else table."""
    from sbdlq.output_formats import DEFAULT_OUTPUT, check_output

    return check_output(given or s.profile_default("output") or DEFAULT_OUTPUT)
