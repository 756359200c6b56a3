"""`peek -o table` holds a page of rows, not the DLQ: its memory does not grow with the number of messages."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from support import dead_letter_all

from sbdlq.cli.commands import dlq
from sbdlq.models import OutboundMessage

N = 2000
PAGE = 30


def _peak(sbdlq: Any, *args: str) -> tuple[int, str]:
    """tracemalloc's peak while `sbdlq peek q ARGS` runs, less what its captured stdout took."""
    tracemalloc.start()
    try:
        r = sbdlq("peek", "q", *args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.exit_code == 0, r.stderr
    return peak - 2 * len(r.stdout.encode()), r.stdout


def test_a_table_of_every_message_takes_the_memory_of_a_page(
    engine: Any, sbdlq: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every one of 2,000 messages in pages of 30: the peak is that of a 90-row table and a page
    of 1,000 messages read (one table of all 2,000 rows, as before, took 15 times the 90-row one)."""
    monkeypatch.setattr(dlq, "TABLE_PAGE_ROWS", PAGE)
    engine.create_queue("q")
    copies = [OutboundMessage(body=b"x" * 150, message_id=f"m{i}") for i in range(N)]
    dead_letter_all(engine, "q", copies, "Bad", "broke")
    sbdlq("peek", "q", "--max", "1")  # the imports, before anything is measured
    few, _ = _peak(sbdlq, "--max", str(3 * PAGE))
    every, out = _peak(sbdlq, "--all")
    assert every < 4 * few
    # Every message, once, in order, in pages at the first page's widths.
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert [row.split("│")[7].strip() for row in rows] == [f"m{i}" for i in range(N)]
    # The first page's widths throughout; only a longer sequence number widens its column.
    widths = [len(row) for row in rows]
    assert widths == sorted(widths)
    assert widths[-1] - widths[0] == len(str(N)) - len("seq")
    assert out.splitlines()[0].strip() == f"q/$DeadLetterQueue (in pages of {PAGE})"
    assert out.splitlines()[-1].strip() == f"q/$DeadLetterQueue: {N} message(s)"


def test_a_table_that_fits_in_a_page_is_one_table_with_its_count(engine: Any, sbdlq: Any) -> None:
    engine.create_queue("q")
    dead_letter_all(engine, "q", [OutboundMessage(body=b"b", message_id=f"m{i}") for i in range(3)], "Bad", "broke")
    out = sbdlq("peek", "q", "--all").stdout.splitlines()
    assert out[0].strip() == "q/$DeadLetterQueue: 3 message(s)"
    assert out[-1].startswith("└")
