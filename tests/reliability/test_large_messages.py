"""Large messages (Premium's up to 100 MB) go through peek, resubmit, purge --export and replay
with memory bounded by --concurrency bodies, not --batch-size bodies.

Each command runs as the real `sbdlq` in a child of a small wrapper process, which reports the
child's peak RSS (`ru_maxrss` of RUSAGE_CHILDREN once it exited): 20 messages of 8 MB with
--concurrency 2 --batch-size 100 would peak over 1.6 GB if a batch were received whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

pytestmark = pytest.mark.slow

N = 20
BODY = 8 * 1024 * 1024
# sbdlq itself is ~60 MB, and each of the --concurrency 2 bodies may be held a few times over
# (received, copied, encoded): ~90-115 MB measured. Receiving whole batches peaks at 210-510 MB
# here (the whole DLQ is 160 MB), and would need 800 MB for 100 such messages.
PEAK_LIMIT_MB = 160
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:], stdout=sys.stdout, stderr=sys.stderr).returncode\n"
    "sys.stderr.write(f'\\nPEAK_KB={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
    "sys.exit(rc)\n"
)


def _body(i: int) -> bytes:
    return f"order {i} ".encode().ljust(BODY, b"x")


def _dead_letter(engine: Engine, queue: str, start: int) -> None:
    """Send and dead-letter N large messages, two at a time (the test process stays small too)."""
    address = parse_address(queue)
    for i in range(start, start + N, 2):
        engine.send(queue, [OutboundMessage(body=_body(j), message_id=f"m-{j}") for j in (i, i + 1)])
        got = engine.receive(address, 2)
        assert engine.dead_letter(address, [m.lock_token for m in got if m.lock_token], "TooBig", "large") == []


def _sbdlq(store: Path, *argv: str, stdout: Path | None = None) -> tuple[float, str]:
    """Run the CLI; its peak RSS in MB and its stderr."""
    env = {**os.environ, "SBDLQ_EMULATOR": str(store), "NO_COLOR": "1", "COLUMNS": "200"}
    with open(stdout or os.devnull, "wb") as out:
        proc = subprocess.run(
            [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "sbdlq", *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=300,
            check=False,
        )
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    head, _, peak = stderr.rpartition("PEAK_KB=")
    return int(peak) / 1024, head


def _count(store: Path, path: str) -> int:
    with Engine(store) as engine:
        return len(engine.peek(parse_address(path), 0, 2 * N))


def test_large_messages_are_handled_with_memory_bounded_by_concurrency(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    with Engine(store) as engine:
        for name in ("orders", "retry"):
            engine.create_queue(name, max_message_size_kb=10 * 1024)
        _dead_letter(engine, "orders", 0)
    bounded = ("--concurrency", "2", "--batch-size", "100")
    peaks: dict[str, float] = {}

    lines = tmp_path / "peek.jsonl"
    peaks["peek -o jsonl"], _ = _sbdlq(store, "peek", "orders", "--all", "-o", "jsonl", stdout=lines)
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [len(r["body"]) for r in records] == [BODY] * N
    table = tmp_path / "peek.txt"
    peaks["peek -o table"], _ = _sbdlq(store, "peek", "orders", "--all", stdout=table)
    assert table.read_text().count("<8.0 MB>") == N

    peaks["resubmit"], _ = _sbdlq(store, "resubmit", "orders", "--to", "retry", *bounded)
    assert (_count(store, "orders/$DeadLetterQueue"), _count(store, "retry")) == (0, N)

    with Engine(store) as engine:
        engine.delete_entity("retry")
        engine.create_queue("retry", max_message_size_kb=10 * 1024)
        _dead_letter(engine, "retry", N)
    export = tmp_path / "export.jsonl"
    peaks["purge --export"], _ = _sbdlq(store, "purge", "retry", "--export", str(export), "--yes", *bounded)
    assert _count(store, "retry/$DeadLetterQueue") == 0
    assert len(export.read_text().splitlines()) == N

    peaks["replay"], _ = _sbdlq(store, "replay", str(export), "--to", "orders", "--concurrency", "2")
    assert _count(store, "orders") == N

    over = {command: round(mb) for command, mb in peaks.items() if mb > PEAK_LIMIT_MB}
    assert not over, f"peak RSS over {PEAK_LIMIT_MB} MB: {over} (all: { {c: round(p) for c, p in peaks.items()} })"
