"""The engine against the physical limit: raw SQLite on the same schema, measured in the same run."""

from __future__ import annotations

import asyncio
import io
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import BODY, outbound, seed_dlq
from sbdlq.addresses import Address, EntityPath, SubQueue, parse_address
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.emulator import store as store_mod
from sbdlq.emulator.engine import Engine
from sbdlq.operations.browse import iter_messages
from sbdlq.operations.purge import purge
from sbdlq.operations.resubmit import resubmit
from sbdlq.operations.spread import SpreadOptions
from sbdlq.output.formats import Emitter

DLQ = Address(EntityPath("orders"), SubQueue.DEAD_LETTER)


def _raw_db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(store_mod._SCHEMA)
    return conn


def raw_rates(n: int, tmp: Path) -> dict[str, float]:
    """Messages per second for a plain insert, scan and batched delete on the same schema."""
    conn = _raw_db(tmp / "raw.db")
    props = '{"tenant":"eu","attempt":1}'
    now = int(time.time() * 1000)
    rows = [
        (1, 1, i, 0, f"m-{i}", "order.created", "application/json", now, now + 3_600_000, props, BODY) for i in range(n)
    ]
    t0 = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO message (entity_id, queue, seq, state, message_id, subject, content_type, enqueued_ms, "
        "expires_ms, props, body) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )
    conn.execute("COMMIT")
    insert = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    count = sum(1 for _ in conn.execute("SELECT * FROM message WHERE entity_id = 1 AND queue = 1 ORDER BY seq"))
    scan = count / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    deleted = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(
            "DELETE FROM message WHERE id IN (SELECT id FROM message WHERE entity_id = 1 AND queue = 1 "
            "AND state = 0 ORDER BY seq LIMIT 500)"
        )
        conn.execute("COMMIT")
        if cur.rowcount <= 0:
            break
        deleted += cur.rowcount
    delete = deleted / (time.perf_counter() - t0)
    conn.close()
    return {"insert": insert, "scan": scan, "delete": delete}


class _Null(io.TextIOBase):
    def write(self, s: str) -> int:
        return len(s)


def run(n: int = 100_000) -> dict[str, Any]:
    """Rates of sbdlq operations and their ratios to raw SQLite."""
    out: dict[str, Any] = {"messages": n}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        raw = raw_rates(n, tmp)
        out["raw_per_s"] = {k: round(v) for k, v in raw.items()}

        eng = Engine(tmp / "send.db")
        eng.create_queue("orders")
        msgs = outbound(n)
        t0 = time.perf_counter()
        eng.send("orders", msgs)
        send_rate = n / (time.perf_counter() - t0)
        address = parse_address("orders")
        t0 = time.perf_counter()
        done = 0
        while True:
            got = eng.receive(address, 1000)
            if not got:
                break
            eng.complete(address, [m.lock_token for m in got if m.lock_token])
            done += len(got)
        recv_rate = done / (time.perf_counter() - t0)
        eng.close()

        seed_dlq(tmp / "peek.db", "orders", n)

        async def peek_all() -> int:
            backend = EmulatorBackend(str(tmp / "peek.db"))
            emitter = Emitter("jsonl", out=_Null())
            count = 0
            async for m in iter_messages(backend, DLQ):
                emitter.item(m.to_json())
                count += 1
            await backend.close()
            return count

        t0 = time.perf_counter()
        peeked = asyncio.run(peek_all())
        peek_rate = peeked / (time.perf_counter() - t0)

        async def do_purge(export: Path | None) -> int:
            backend = EmulatorBackend(str(tmp / "peek.db"))
            result = await purge(backend, DLQ, export=export)
            await backend.close()
            return result.purged

        t0 = time.perf_counter()
        purged_export = asyncio.run(do_purge(tmp / "export.jsonl"))
        export_rate = purged_export / (time.perf_counter() - t0)

        seed_dlq(tmp / "peek.db", "orders", n)
        t0 = time.perf_counter()
        purged = asyncio.run(do_purge(None))
        purge_rate = purged / (time.perf_counter() - t0)

        seed_dlq(tmp / "resubmit.db", "orders", n)
        Engine(tmp / "resubmit.db").create_queue("retry")

        async def do_resubmit() -> int:
            backend = EmulatorBackend(str(tmp / "resubmit.db"))
            result = await resubmit(backend, DLQ, EntityPath("retry"), batch_size=1000, concurrency=256)
            await backend.close()
            return result.resubmitted

        t0 = time.perf_counter()
        moved = asyncio.run(do_resubmit())
        resubmit_rate = moved / (time.perf_counter() - t0)

        # --spread: under lock, each chunk scheduled, its numbers synced to the record, then completed.
        seed_dlq(tmp / "spread.db", "orders", n)
        Engine(tmp / "spread.db").create_queue("retry")

        async def do_spread() -> int:
            backend = EmulatorBackend(str(tmp / "spread.db"))
            result = await resubmit(backend, DLQ, EntityPath("retry"), spread=SpreadOptions("2h"))
            await backend.close()
            return result.resubmitted

        before = os.environ.get("SBDLQ_STATE_DIR")
        os.environ["SBDLQ_STATE_DIR"] = str(tmp / "state")  # the spread record: never the user's state dir
        try:
            t0 = time.perf_counter()
            spread = asyncio.run(do_spread())
            spread_rate = spread / (time.perf_counter() - t0)
        finally:
            if before is None:
                del os.environ["SBDLQ_STATE_DIR"]
            else:
                os.environ["SBDLQ_STATE_DIR"] = before

    out["sbdlq_per_s"] = {
        "engine_send": round(send_rate),
        "engine_receive_complete": round(recv_rate),
        "peek_all_jsonl": round(peek_rate),
        "purge_all": round(purge_rate),
        "purge_export": round(export_rate),
        "resubmit": round(resubmit_rate),
        "resubmit_spread": round(spread_rate),
    }
    out["ratios"] = {
        "engine_send_vs_raw_insert": round(send_rate / raw["insert"], 3),
        "purge_vs_raw_delete": round(purge_rate / raw["delete"], 3),
        "purge_export_vs_raw_delete": round(export_rate / raw["delete"], 3),
        "peek_jsonl_vs_raw_scan": round(peek_rate / raw["scan"], 3),
        "resubmit_vs_raw_insert": round(resubmit_rate / raw["insert"], 3),
        "resubmit_spread_vs_resubmit": round(spread_rate / resubmit_rate, 3),
    }
    out["targets"] = {
        "engine_send_vs_raw_insert": 0.50,
        "purge_vs_raw_delete": 0.40,
        "peek_jsonl_vs_raw_scan": 0.10,
        "resubmit_vs_raw_insert": 0.15,
        "resubmit_spread_vs_resubmit": 0.10,
    }
    return out
