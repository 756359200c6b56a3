"""Start-up: `sbdlq --help` and `sbdlq count` as multiples of `python -c pass`; heavy imports kept off."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import median_seconds, sbdlq_cmd
from sbdlq.emulator.engine import Engine

HEAVY = ("azure", "proton", "pydantic")


def heavy_imports(argv: list[str], env: dict[str, str]) -> list[str]:
    """Top-level packages from HEAVY that a command imports (read from -X importtime)."""
    code = "import sys; from sbdlq.cli.main import run; sys.argv = ['sbdlq'] + sys.argv[1:]; run()"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *argv],
        capture_output=True,
        text=True,
        env={**env},
    )
    found = set()
    for line in proc.stderr.splitlines():
        if "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            top = name.split(".")[0]
            if top in HEAVY:
                found.add(top)
    return sorted(found)


def run(repeat: int = 15) -> dict[str, Any]:
    import compileall
    import os

    import sbdlq

    # As installed: pip byte-compiles the package, so a start reads .pyc files, not sources.
    compileall.compile_dir(str(Path(sbdlq.__file__).parent), quiet=1)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as d:
        store = Path(d) / "e.db"
        eng = Engine(store)
        eng.create_queue("orders")
        eng.close()
        env = {**os.environ, "SBDLQ_EMULATOR": str(store)}
        bare = median_seconds([sys.executable, "-c", "pass"], repeat)
        help_s = median_seconds([*sbdlq_cmd(), "--help"], repeat, env=env)
        count_s = median_seconds([*sbdlq_cmd(), "count", "orders"], repeat, env=env)
        return {
            "python_pass_ms": round(bare * 1000, 1),
            "help_ms": round(help_s * 1000, 1),
            "count_ms": round(count_s * 1000, 1),
            "help_ratio": round(help_s / bare, 1),
            "count_ratio": round(count_s / bare, 1),
            "targets": {"count_ratio": 8, "help_ratio": 15},
            "heavy_imports_help": heavy_imports(["--help"], env),
            "heavy_imports_count": heavy_imports(["count", "orders"], env),
        }
