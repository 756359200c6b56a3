"""What a Ctrl-C means depends on when it lands; a script reads which from the exit status alone.

- Before the command's work begins (imports, parsing, settings, a confirmation): nothing was
  done. One line, `sbdlq: interrupted before anything was done`, and exit 130.
- While the work runs: the command's own handling (a moving run finishes the chunks in flight
  and prints its partial summary, `operations/stopping.py`), exit 130.
- Once the work has returned: its result stands, is reported, and the exit status is the run's
  own (0, 1, 3, ...), never 130 for a run that finished. A first Ctrl-C from then on is dropped;
  a second one interrupts at once (the operator insists: a teardown that hangs), exit 130.

Only the console script (`entry.main`) arms the last rule: it changes the process's SIGINT
handler, which a test running the CLI in process must keep.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

#: The line of an interrupt before the work began.
BEFORE_WORK = "interrupted before anything was done"

_armed = False
_phase = "starting"  # "starting" → "working" → "returned"
_late = 0


def arm() -> None:
    """This process is the `sbdlq` console script: a finished run may keep Ctrl-C from its status."""
    global _armed, _phase, _late
    _armed, _phase, _late = True, "starting", 0


def begin_work() -> None:
    """The command's work begins: from here it may have done something."""
    global _phase
    if _phase == "starting":
        _phase = "working"


def work_returned() -> None:
    """The command's work returned its result: a first Ctrl-C from here on is dropped."""
    global _phase
    _phase = "returned"
    if _armed and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _after_the_work)


def began() -> bool:
    """Whether the command's work has begun (anything may have been done)."""
    return _phase != "starting"


def line(during_work: str = "interrupted") -> str:
    """The one stderr line of a Ctrl-C that stops the command now (without "sbdlq: ")."""
    return during_work if began() else BEFORE_WORK


def _after_the_work(signum: int, frame: FrameType | None) -> None:
    """SIGINT once the work returned: the first is dropped, a second interrupts."""
    global _late
    _late += 1
    if _late > 1:
        raise KeyboardInterrupt
