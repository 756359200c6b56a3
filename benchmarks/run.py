"""Run every benchmark, print a table of figures and ratios, write them as JSON.

    python -m benchmarks.run [--quick] [--only overlap,engine,memory,startup,wire,fingerprint] [--json PATH]
    python -m benchmarks.run --only ui     (selectable only: `sbdlq ui` over a 1M-message DLQ)
    python -m benchmarks.run --only million  (selectable only: incident scale through serve, 0 and 70 ms;
                                             peek --all -o table's peak RSS over 150,000)

Every figure is a ratio measured in the same run; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

SECTIONS = ("startup", "overlap", "engine", "memory", "wire", "fingerprint")


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes; the naive loop scaled from 100")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--json", default="benchmarks/results/latest.json", help="where to write the figures")
    args = parser.parse_args(argv)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    figures: dict[str, Any] = {"machine": machine()}
    for section in wanted:
        print(f"== {section}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        if section == "startup":
            from benchmarks import startup

            figures[section] = startup.run()
        elif section == "overlap":
            from benchmarks import overlap

            figures[section] = overlap.run(quick=args.quick)
        elif section == "engine":
            from benchmarks import engine, processes

            size = 20_000 if args.quick else 100_000
            figures[section] = engine.run(size)
            # Whole `sbdlq` processes against raw-sqlite3 processes doing the same work (issue 17).
            figures[section]["processes"] = processes.run(size)
        elif section == "memory":
            from benchmarks import memory

            figures[section] = memory.run(large=100_000 if args.quick else 1_000_000)
        elif section == "ui":
            from benchmarks import ui

            figures[section] = ui.run(100_000 if args.quick else 1_000_000)
        elif section == "fingerprint":
            from benchmarks import fingerprint

            figures[section] = fingerprint.run(n=20_000 if args.quick else 200_000)
        elif section == "million":
            from benchmarks import million

            figures[section] = million.run(100_000, 20_000, table=20_000) if args.quick else million.run()
        elif section == "wire":
            from benchmarks import wire

            figures[section] = wire.run(n=100 if args.quick else 200, local_n=2000 if args.quick else 10_000)
        else:
            parser.error(f"unknown section {section}")
        figures[section]["section_seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps({section: figures[section]}, indent=1))
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"figures written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
