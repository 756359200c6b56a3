"""The raw-sqlite3 equivalents of `sbdlq resubmit`, `peek --all -o jsonl` and `purge`, run as processes.

    python -m benchmarks.raw_sqlite resubmit|peek|purge STORE QUEUE

Plain statements on the emulator's schema, no sbdlq import (the process pays only for
sqlite3 and json): the floor the whole sbdlq commands are measured against
(benchmarks/processes.py). Each does the same work as the command, in the same batches:
- resubmit: read DLQ rows in batches of 100 (the --batch-size default), insert the copies into
  the queue (dead-letter properties dropped, sbdlq-resubmitted-from added, fresh sequence
  numbers, enqueued now) and delete the originals, one transaction per batch;
- peek: one scan of the DLQ in sequence order, one JSON line per message in the Message
  shape of DESIGN §4 (the same bytes sbdlq writes), on stdout;
- purge: delete the DLQ in batches of 500 (the --batch-size default), one transaction each.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from base64 import b64encode
from datetime import UTC, datetime

MAIN, DLQ = 0, 1
MAX_TIME_MS = 253402300799000
NEVER_MS = 10675199 * 86400 * 1000


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _entity(conn: sqlite3.Connection, queue: str) -> tuple[int, int]:
    eid, ttl = conn.execute("SELECT id, default_ttl_ms FROM entity WHERE path = ?", (queue,)).fetchone()
    return int(eid), int(ttl)


_COPY = (
    "INSERT INTO message (entity_id, queue, seq, state, message_id, session_id, correlation_id, subject, "
    "content_type, reply_to, reply_to_session_id, to_, partition_key, ttl_ms, enqueued_ms, expires_ms, "
    "delivery_count, hops, props, body, body_type, amqp) VALUES (?, 0, ?, 0, ?,?,?,?,?,?,?,?,?, ?, ?, ?, 0, 0, "
    "json_set(json_remove(COALESCE(?, '{}'), '$.DeadLetterReason', '$.DeadLetterErrorDescription'), "
    "'$.\"sbdlq-resubmitted-from\"', ?), ?, ?, ?)"
)


def resubmit(path: str, queue: str, batch: int = 100) -> int:
    conn = _connect(path)
    eid, ceiling = _entity(conn, queue)
    source = f"{queue}/$DeadLetterQueue"
    moved = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(
            "SELECT id, seq, message_id, session_id, correlation_id, subject, content_type, reply_to, "
            "reply_to_session_id, to_, partition_key, ttl_ms, props, body, body_type, amqp FROM message "
            f"WHERE entity_id = ? AND queue = {DLQ} AND state = 0 ORDER BY seq LIMIT ?",
            (eid, batch),
        ).fetchall()
        if not rows:
            conn.execute("COMMIT")
            break
        (end,) = conn.execute(
            "UPDATE entity SET next_seq = next_seq + ? WHERE id = ? RETURNING next_seq", (len(rows), eid)
        ).fetchone()
        seq = end - len(rows)
        now = int(time.time() * 1000)
        copies = []
        for r in rows:
            ttl = ceiling if r[11] is None else min(r[11], ceiling)
            copies.append((eid, seq, *r[2:11], ttl, now, min(now + ttl, MAX_TIME_MS), r[12], f"{source}:{r[1]}",
                           r[13], r[14], r[15]))  # fmt: skip
            seq += 1
        conn.executemany(_COPY, copies)
        ids = [r[0] for r in rows]
        conn.execute(f"DELETE FROM message WHERE id IN ({','.join('?' * len(ids))})", ids)
        conn.execute("COMMIT")
        moved += len(rows)
    conn.close()
    return moved


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000.0, UTC).isoformat().replace("+00:00", "Z")


def peek(path: str, queue: str) -> int:
    conn = _connect(path)
    eid, _ = _entity(conn, queue)
    encode = json.JSONEncoder(ensure_ascii=False).encode
    write = sys.stdout.write
    n = 0
    cursor = conn.execute(
        "SELECT seq, message_id, enqueued_ms, expires_ms, delivery_count, dl_source, subject, correlation_id, "
        "content_type, session_id, reply_to, to_, ttl_ms, props, body FROM message "
        f"WHERE entity_id = ? AND queue = {DLQ} ORDER BY seq",
        (eid,),
    )
    for seq, mid, enq, exp, dc, src, subj, corr, ctype, sid, reply, to, ttl, props, body in cursor:
        p = json.loads(props) if props else {}
        reason, description = p.get("DeadLetterReason"), p.get("DeadLetterErrorDescription")
        try:
            text, encoding = body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = b64encode(body).decode("ascii"), "base64"
        record = {
            "sequence_number": seq,
            "message_id": mid,
            "enqueued_time": _iso(enq),
            "expires_at": _iso(exp) if exp < MAX_TIME_MS else None,
            "delivery_count": dc,
            "dead_letter_reason": None if reason is None else str(reason),
            "dead_letter_error_description": None if description is None else str(description),
            "dead_letter_source": src,
            "subject": subj,
            "correlation_id": corr,
            "content_type": ctype,
            "session_id": sid,
            "reply_to": reply,
            "to": to,
            "time_to_live_s": ttl / 1000 if ttl is not None and ttl < NEVER_MS else None,
            "application_properties": p,
            "body": text,
            "body_encoding": encoding,
        }
        write(encode(record) + "\n")
        n += 1
    sys.stdout.flush()
    conn.close()
    return n


def purge(path: str, queue: str, batch: int = 500) -> int:
    conn = _connect(path)
    eid, _ = _entity(conn, queue)
    deleted = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(
            "DELETE FROM message WHERE id IN (SELECT id FROM message WHERE entity_id = ? "
            f"AND queue = {DLQ} AND state = 0 ORDER BY seq LIMIT ?)",
            (eid, batch),
        )
        conn.execute("COMMIT")
        if cur.rowcount <= 0:
            break
        deleted += cur.rowcount
    conn.close()
    return deleted


def main(argv: list[str]) -> int:
    op, path, queue = argv
    done = {"resubmit": resubmit, "peek": peek, "purge": purge}[op](path, queue)
    print(f"{op}: {done}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
