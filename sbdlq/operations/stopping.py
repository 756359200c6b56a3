"""SIGINT and SIGTERM during a moving run: stop taking messages, finish what is in flight, report.

Without this, SIGTERM (what `kill`, systemd and Kubernetes send) ended a run like SIGKILL, and
Ctrl-C cancelled it without a summary. While messages move, the first signal only asks the loop to
stop: chunks between send and complete finish, the rest is released, and the run returns its
partial result. Before anything moves (the plan's scan), or on a second signal, the run is
cancelled at once: nothing it could leave half done is in flight then, or the operator insists.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

from sbdlq.errors import ExitStatus, SbdlqError

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
Handler = Callable[[int, FrameType | None], Any] | int | None


class RunInterrupted(SbdlqError):
    """A run stopped by a signal; carries its partial result (exit 130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, result: Any, signum: int) -> None:
        # SIGINT keeps the line a Ctrl-C always printed.
        what = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
        super().__init__(f"{what}; messages not yet settled stay in their queue")
        self.result = result
        self.signum = signum
        self.exit_status = ExitStatus.INTERRUPTED if signum == signal.SIGINT else ExitStatus.TERMINATED


class Stopper:
    """Owns SIGINT/SIGTERM for the life of a run (see the module's docstring)."""

    def __init__(self, request_stop: Callable[[str], None]) -> None:
        self.request_stop = request_stop
        self.signum: int | None = None
        self.moving = False
        self._task: asyncio.Task[Any] | None = None

    def _on_signal(self, signum: int) -> None:
        first = self.signum is None
        self.signum = signum if first else self.signum
        if first and self.moving:
            self.request_stop(f"interrupted by {signal.Signals(signum).name}")
        elif self._task is not None:
            self._task.cancel()

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopper]:
        """Route the signals here while the block runs (a no-op where the loop can't take them)."""
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        previous: dict[signal.Signals, Handler] = {}
        for sig in SIGNALS:
            try:
                old = signal.getsignal(sig)
                loop.add_signal_handler(sig, self._on_signal, sig)
                previous[sig] = old
            except (ValueError, RuntimeError, NotImplementedError):
                pass  # not the main thread, or no signals on this platform
        try:
            yield self
        finally:
            for sig, old in previous.items():
                loop.remove_signal_handler(sig)
                # remove_signal_handler resets to the default; asyncio.run's own Ctrl-C handler goes back.
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(sig, old)  # type: ignore[arg-type]


async def run_stoppable(work: Callable[[Stopper], Awaitable[T]], stopper: Stopper, partial: Callable[[], Any]) -> T:
    """Run `work` with the signal handlers installed; a stop that cancelled it raises
    RunInterrupted carrying `partial()`, the result accounted so far."""
    try:
        with stopper.installed():
            return await work(stopper)
    except asyncio.CancelledError:
        if stopper.signum is None:
            raise
        raise RunInterrupted(partial(), stopper.signum) from None
