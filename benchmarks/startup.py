"""Start-up: `sbdlq --help` and `sbdlq count` as multiples of `python -c pass` and of the
Typer + Rich import, as installed.

"As installed" means what `pip install .` leaves in a fresh venv: the package copied into
its site-packages (not an editable finder), byte-compiled, and a console script. The
baseline is the bare python of that same venv, so a slow interpreter start or a crowded
site-packages counts on both sides. The dependencies are the running interpreter's, seen
through one .pth line: the same files `pip install` would have put there.

The commands are run in turn, one of each per round, so a moment of load falls on all of
them alike; each figure is the minimum over the rounds (the run the machine disturbed
least) beside the median, by wall time and by CPU time.
"""

from __future__ import annotations

import compileall
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from sbdlq.emulator.engine import Engine

HEAVY = ("azure", "proton", "pydantic", "asyncio", "markdown_it", "rich.table")
TARGETS = {"count_ratio": 8, "help_ratio": 10, "help_over_typer_rich": 1.5, "count_over_typer_rich": 1.5}

_SCRIPT = """#!{python}
import sys
from sbdlq.entry import main
if __name__ == "__main__":
    sys.exit(main())
"""


def fresh_venv(root: Path) -> Path:
    """A new venv with sbdlq installed non-editable and byte-compiled; returns its python."""
    import sbdlq

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    shutil.copytree(Path(sbdlq.__file__).parent, site / "sbdlq", ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(str(site / "sbdlq"), quiet=1)
    (site / "sbdlq-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = root / "bin" / "sbdlq"
    script.write_text(_SCRIPT.format(python=python))
    script.chmod(0o755)
    return python


def timed_rounds(
    commands: dict[str, list[str]], repeat: int, env: dict[str, str]
) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) seconds of each command, `repeat` rounds of one run each, in turn (after a warm-up round)."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for i in range(repeat + 1):
        for name, argv in commands.items():
            t0 = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            _, _, usage = os.wait4(proc.pid, 0)
            if i:  # the first round warms the page cache
                times[name].append((time.perf_counter() - t0, usage.ru_utime + usage.ru_stime))
    return times


def heavy_imports(python: Path, argv: list[str], env: dict[str, str]) -> list[str]:
    """Modules from HEAVY that a command imports (read from -X importtime)."""
    code = "import sys; from sbdlq.entry import main; sys.argv = ['sbdlq'] + sys.argv[1:]; main()"
    proc = subprocess.run([str(python), "-X", "importtime", "-c", code, *argv], capture_output=True, text=True, env=env)
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if "|" in line}
    return sorted(h for h in HEAVY if any(name == h or name.startswith(h + ".") for name in imported))


def run(repeat: int = 15) -> dict[str, Any]:
    """Start-up of three commands (minimum of `repeat` rounds) and their ratios to the same venv's
    bare python and Typer + Rich import."""
    with tempfile.TemporaryDirectory() as d:
        python = fresh_venv(Path(d) / "venv")
        sbdlq = str(python.parent / "sbdlq")
        store = Path(d) / "e.db"
        eng = Engine(store)
        eng.create_queue("orders")
        eng.close()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        env["SBDLQ_EMULATOR"] = str(store)
        commands = {
            "python_pass": [str(python), "-c", "pass"],
            # What a Typer + Rich CLI cannot start without: the floor the goal is set against.
            "typer_rich_import": [str(python), "-c", "import typer, rich.console, rich.table"],
            "help": [sbdlq, "--help"],
            "count": [sbdlq, "count", "orders"],
            "count_json": [sbdlq, "count", "orders", "-o", "json"],
        }
        rounds = timed_rounds(commands, repeat, env)
        wall = {name: min(w for w, _ in runs) for name, runs in rounds.items()}
        cpu = {name: min(c for _, c in runs) for name, runs in rounds.items()}
        figures: dict[str, Any] = {"rounds": repeat}
        figures |= {f"{name}_ms": round(wall[name] * 1000, 1) for name in commands}
        figures |= {
            f"{name}_median_ms": round(statistics.median(w for w, _ in runs) * 1000, 1) for name, runs in rounds.items()
        }
        for name in ("help", "count", "count_json"):
            figures[f"{name}_ratio"] = round(wall[name] / wall["python_pass"], 1)
            # CPU time is what a busy machine distorts least: the same ratio, by CPU seconds.
            figures[f"{name}_cpu_ratio"] = round(cpu[name] / cpu["python_pass"], 1)
            # Against the Typer + Rich import (issue 35's goal: at most 1.5).
            figures[f"{name}_over_typer_rich"] = round(wall[name] / wall["typer_rich_import"], 2)
            figures[f"{name}_cpu_over_typer_rich"] = round(cpu[name] / cpu["typer_rich_import"], 2)
            figures[f"{name}_median_over_typer_rich"] = round(
                statistics.median(w for w, _ in rounds[name])
                / statistics.median(w for w, _ in rounds["typer_rich_import"]),
                2,
            )
        return {
            **figures,
            "targets": TARGETS,
            "heavy_imports_help": heavy_imports(python, ["--help"], env),
            "heavy_imports_count": heavy_imports(python, ["count", "orders"], env),
            "heavy_imports_count_json": heavy_imports(python, ["count", "orders", "-o", "json"], env),
        }


if __name__ == "__main__":
    import json

    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 15), indent=2))
