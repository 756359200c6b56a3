"""Memory: peak RSS of streaming commands over 1M DLQ messages vs 1k (nothing holds the whole DLQ)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import run_child, sbdlq_cmd, seed_dlq
from sbdlq.emulator.engine import Engine


def _peaks(store: Path, tmp: Path) -> dict[str, int]:
    env = {"SBDLQ_EMULATOR": str(store)}
    peaks = {}
    with open(tmp / "peek.jsonl", "wb") as out:
        _, rss, rc = run_child([*sbdlq_cmd(), "peek", "orders", "--all", "-o", "jsonl"], env=env, stdout=out.fileno())
    assert rc == 0, "peek failed"
    peaks["peek_all_jsonl"] = rss
    Engine(store).create_queue("retry", exist_ok=True)
    _, rss, rc = run_child([*sbdlq_cmd(), "resubmit", "orders", "--to", "retry", "-o", "json"], env=env)
    assert rc == 0, "resubmit failed"
    peaks["resubmit"] = rss
    # Move them back into the DLQ so purge has work: dead-letter what resubmit moved.
    eng = Engine(store)
    from sbdlq.paths import parse_address

    retry = parse_address("retry")
    while True:
        got = eng.receive(retry, 5000)
        if not got:
            break
        eng.dead_letter(retry, [m.lock_token for m in got if m.lock_token], "Again", "benchmark")
    eng.close()
    _, rss, rc = run_child(
        [*sbdlq_cmd(), "purge", "retry", "--export", str(tmp / "export.jsonl"), "--yes", "-o", "json"], env=env
    )
    assert rc == 0, "purge failed"
    peaks["purge_export"] = rss
    return peaks


def run(large: int = 1_000_000, small: int = 1_000) -> dict[str, Any]:
    out: dict[str, Any] = {"large": large, "small": small}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for n, key in ((small, "small_kib"), (large, "large_kib")):
            store = tmp / f"mem-{n}.db"
            seed_dlq(store, "orders", n, chunk=20_000)
            out[key] = _peaks(store, tmp)
            subprocess.run(["rm", "-f", str(tmp / "peek.jsonl"), str(tmp / "export.jsonl")], check=False)
    out["growth_mib"] = {k: round((out["large_kib"][k] - out["small_kib"][k]) / 1024, 1) for k in out["small_kib"]}
    out["target_growth_mib"] = 100
    return out
