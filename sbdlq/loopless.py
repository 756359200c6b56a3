"""Run a coroutine without an event loop, for work that never waits on I/O.

Importing asyncio costs ~20 ms, more than a whole `sbdlq count` on the local emulator
needs: the emulator backend answers in process and only ever yields bare, to let other
tasks run. Commands that read (count, peek, inspect-reason) are driven here when their
backend is the in-process emulator; everything else runs under `asyncio.run`.
"""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class NeedsEventLoop(RuntimeError):
    """The coroutine waited on a future: it has to run under asyncio."""


@types.coroutine
def pause() -> Generator[None, None, None]:
    """Let other tasks run once: `asyncio.sleep(0)` without importing asyncio."""
    yield


def run_without_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Drive `coro` to its end; it may only pause (a bare yield), never wait on a future."""
    try:
        while True:
            if coro.send(None) is not None:
                coro.close()
                raise NeedsEventLoop(f"{coro!r} waited on a future outside an event loop")
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
