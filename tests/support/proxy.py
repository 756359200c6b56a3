"""The delaying TCP proxy the tests put in front of `emulator serve`: the benchmarks' own, shared.

One implementation for both: the wire benchmark and the latency tests measure and check the
same wire. The repository root is put on sys.path for it when pytest runs without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from benchmarks.proxy import DelayingProxy  # noqa: E402

__all__ = ["DelayingProxy"]
