"""Fingerprints: `inspect-reason --by fingerprint` against `--by description` over one DLQ of
varied descriptions (every ten messages a new text, as after an outage), and its peak RSS at
two sizes (groups are counted as messages stream past: memory must not grow with them).

Figures are ratios of the same run: the masks' cost over the scan's, the memory's growth.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import median_seconds, outbound, sbdlq_cmd
from benchmarks.memory import run_child as run_measured
from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine

#: messages dead-lettered with one description (each chunk a new one)
SAME_TEXT = 10
_CAUSES = (
    ("OrderNotFound", "Order {n} not found in store {region}"),
    (
        "HttpRequestException",
        "Response status code does not indicate success: 503 (Service Unavailable). "
        "POST https://pay.example.com/v2/charge/ch_{hex} failed after {ms}ms",
    ),
    ("SqlException", "Violation of PRIMARY KEY constraint 'PK_Orders'. The duplicate key value is ({guid})."),
    ("ValidationError", "1 validation error for OrderCreated amount: input_value={amount} at {ts}"),
)


def _description(r: random.Random) -> tuple[str, str]:
    reason, text = r.choice(_CAUSES)
    guid = "-".join("".join(r.choice("0123456789abcdef") for _ in range(k)) for k in (8, 4, 4, 4, 12))
    return reason, text.format(
        n=r.randint(1, 10**7),
        region=r.choice(["eu-west-1", "us-east-2", "ap-south-1"]),
        hex="".join(r.choice("0123456789abcdef") for _ in range(12)),
        ms=r.randint(10, 30000),
        guid=guid,
        amount=-r.randint(1, 99999) / 100,
        ts=f"2024-05-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00Z",
    )


def seed_varied(path: Path, n: int) -> None:
    """orders' DLQ: n messages, every SAME_TEXT of them a new description of one of four causes."""
    r = random.Random(36)
    eng = Engine(path)
    eng.create_queue("orders", exist_ok=True, lock_duration_s=300)
    address = parse_address("orders")
    for start in range(0, n, SAME_TEXT):
        k = min(SAME_TEXT, n - start)
        eng.send("orders", outbound(k, start=start))
        got = eng.receive(address, k)
        eng.dead_letter(address, [m.lock_token for m in got if m.lock_token], *_description(r))
    eng.close()


def run(n: int = 200_000, small: int = 2_000, repeat: int = 3) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": n}
    with tempfile.TemporaryDirectory() as d:
        stores = {size: Path(d) / f"fp-{size}.db" for size in (small, n)}
        for size, store in stores.items():
            seed_varied(store, size)
        env = {"SBDLQ_EMULATOR": str(stores[n])}
        cmd = [*sbdlq_cmd(), "inspect-reason", "orders", "-o", "json", "--by"]
        by_description = median_seconds([*cmd, "description"], repeat, env=env)
        by_fingerprint = median_seconds([*cmd, "fingerprint"], repeat, env=env)
        out["by_description_s"] = round(by_description, 2)
        out["by_fingerprint_s"] = round(by_fingerprint, 2)
        out["fingerprint_over_description"] = round(by_fingerprint / by_description, 2)
        peaks = {}
        for size, store in stores.items():
            argv = ["inspect-reason", "orders", "-o", "json", "--by", "fingerprint"]
            _, kib, rc = run_measured(argv, env={"SBDLQ_EMULATOR": str(store)})
            assert rc == 0, "inspect-reason failed"
            peaks[size] = kib
        out["peak_rss_growth_mib"] = round((peaks[n] - peaks[small]) / 1024, 1)
    return out
