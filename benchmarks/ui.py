"""`sbdlq ui` on a 1,000,000-message DLQ: time to the first page, and memory while paging.

    python -m benchmarks.run --only ui [--quick]      (not in the default set: seeding 1M takes minutes)

The app runs headless (Textual's pilot) at 80×24 on the emulator backend. Figures: seconds
from start to the first page shown, and Python heap (tracemalloc) after the first page and
after paging on, as a ratio: flat means the pane holds one page, never the DLQ.
"""

from __future__ import annotations

import asyncio
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.common import seed_dlq

PAGES = (10, 100, 300)


async def _measure(store: Path) -> dict[str, Any]:
    from sbdlq.addresses import Address, SubQueue, parse_entity
    from sbdlq.backends.emulator import EmulatorBackend
    from sbdlq.ui.app import DlqApp
    from sbdlq.ui.messages_pane import MessagesPane

    tracemalloc.start()
    t0 = time.perf_counter()
    start = Address(parse_entity("orders"), SubQueue.DEAD_LETTER)
    app = DlqApp(EmulatorBackend(str(store)), refresh_s=3600, entity=start)
    figures: dict[str, Any] = {}
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(MessagesPane)
        while not pane.page:
            await pilot.pause()
        figures["first_page_s"] = round(time.perf_counter() - t0, 3)
        figures["page_rows"] = len(pane.page)
        base = tracemalloc.get_traced_memory()[0]
        figures["heap_after_first_page_mb"] = round(base / 2**20, 2)
        done = 0
        t1 = time.perf_counter()
        for target in PAGES:
            while done < target:
                await pane.action_next_page()
                done += 1
            heap = tracemalloc.get_traced_memory()[0]
            figures[f"heap_after_{target}_pages_ratio"] = round(heap / base, 2)
        figures["page_s"] = round((time.perf_counter() - t1) / done, 4)
        figures["last_sequence_shown"] = pane.page[-1].sequence_number
    tracemalloc.stop()
    figures["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return figures


def run(n: int = 1_000_000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "ui.db"
        t0 = time.perf_counter()
        seed_dlq(store, "orders", n)
        figures: dict[str, Any] = {"messages": n, "seed_s": round(time.perf_counter() - t0, 1)}
        figures.update(asyncio.run(_measure(store)))
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
