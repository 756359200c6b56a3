"""The emulator's clock: the wall clock, shifted by SBDLQ_EMULATOR_CLOCK_SKEW when set.

Both the backends (EmulatorBackend) and the AMQP listener read it, so it lives here, in the
emulator package, which imports nothing from sbdlq.backends or sbdlq.cli.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from sbdlq.timeparse import parse_duration


def emulator_clock() -> Callable[[], float] | None:
    """SBDLQ_EMULATOR_CLOCK_SKEW shifts the emulator's clock (tests let locks lapse without sleeping)."""
    raw = os.environ.get("SBDLQ_EMULATOR_CLOCK_SKEW")
    if not raw:
        return None
    skew = parse_duration(raw, what="SBDLQ_EMULATOR_CLOCK_SKEW")
    return lambda: time.time() + skew
