"""Regenerate docs/ui.svg, the screenshot of `sbdlq ui` in docs/ui.md, from the demo namespace.

    python docs/ui_screenshot.py [--out docs/ui.svg]

Headless (Textual's pilot), 100×30, no colour: the same picture on every machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent


async def shoot(store: Path) -> str:
    from sbdlq.backends.emulator import EmulatorBackend
    from sbdlq.ui.app import DlqApp

    app = DlqApp(EmulatorBackend(str(store)), refresh_s=3600, target="emulator demo store")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"orders", "enter", "enter")
        await pilot.pause()
        await pilot.press("space", "down", "space")
        await pilot.pause()
        return app.export_screenshot(title="sbdlq ui")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "ui.svg"))
    args = parser.parse_args()
    os.environ["NO_COLOR"] = "1"
    from sbdlq.emulator.admin import EmulatorAdmin
    from sbdlq.emulator.engine import Engine

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "demo.db"
        engine = Engine(store)
        EmulatorAdmin(engine).demo()
        engine.close()
        svg = asyncio.run(shoot(store))
    Path(args.out).write_text(svg, encoding="utf-8")
    print(f"wrote {args.out} ({len(svg)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
