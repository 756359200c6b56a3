"""Stopping a long-running listener cleanly on SIGINT and SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set `stop` instead of killing the process (main thread only; restored after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
