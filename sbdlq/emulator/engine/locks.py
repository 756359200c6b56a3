"""Locks and settlement: taking messages (locked or deleted), the locks a caller still
holds, and how a lock ends (complete, abandon, defer, dead-letter, release, lapse)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sbdlq.models import ReceiveMode

from ..property_json import dump_props, load_props
from .errors import DeferredLocked, NotDeferred
from .rows import (
    LOCK_COLUMNS,
    LockRow,
    MessageRow,
    chunks,
    delete_ids,
    lock_rows,
    marks,
    message_rows,
    stamp,
    to_message,
)
from .vocabulary import EXPIRED, Entity, Queue, State, lock_tokens, max_deliveries

if TYPE_CHECKING:
    from sbdlq.messages import Message

    from .router import Router  # passed in: `count` reaches lapsed_exists without loading it

_AVAILABLE = (
    f"entity_id = ? AND queue = ? AND state = {State.ACTIVE:d} AND seq > ? "
    "AND (locked_until_ms IS NULL OR locked_until_ms <= ?)"
)
_LOCK = "UPDATE message SET lock_token = ?, locked_until_ms = ?, delivery_count = delivery_count + 1 WHERE id = ?"


def take_available(
    db: sqlite3.Connection,
    router: Router,
    ent: Entity,
    queue: Queue,
    max_count: int,
    mode: ReceiveMode,
    session_id: str | None,
    now: int,
) -> list[Message]:
    """Up to max_count available messages in sequence order, locked or deleted.

    A receiver on the main queue is what expires messages (lazily, as the service does):
    expired ones met on the way are dropped or dead-lettered.
    """
    out: list[Message] = []
    expired: list[int] = []
    after = -1
    page = max_count
    where = _AVAILABLE if session_id is None else _AVAILABLE + " AND session_id = ?"
    while len(out) < max_count:
        want = max_count - len(out)
        args: list[Any] = [ent.id, queue, after, now]
        if session_id is not None:
            args.append(session_id)
        rows = message_rows(db, where + " ORDER BY seq LIMIT ?", (*args, max(page, want)))
        if not rows:
            break
        take: list[MessageRow] = []
        skipped = 0
        for r in rows:
            after = r.seq
            if queue == Queue.MAIN and r.expires_ms <= now:
                expired.append(r.id)
                skipped += 1
                continue
            take.append(r)
            if len(take) == want:
                break
        if skipped:
            # A run of expired messages: read further ahead next time round.
            page = min(max(page * 2, 64), 4096)
        if mode is ReceiveMode.RECEIVE_AND_DELETE:
            delete_ids(db, [r.id for r in take])
            out.extend(to_message(r, delivered=True) for r in take)
        elif take:
            out.extend(_lock(db, ent, take, now))
    expire_ids(db, router, ent, expired, now)
    return out


def available_rows(
    db: sqlite3.Connection, ent: Entity, queue: Queue, after: int, max_count: int, now: int
) -> list[MessageRow]:
    """Up to max_count rows a receive could take from a dead-letter queue, after a sequence
    number, in order, without locking them (a DLQ has no expiry to apply on the way)."""
    if queue == Queue.MAIN:
        raise ValueError("a main queue's messages expire as they are received: use take_available")
    return message_rows(db, _AVAILABLE + " ORDER BY seq LIMIT ?", (ent.id, queue, after, now, max_count))


def _lock(db: sqlite3.Connection, ent: Entity, rows: list[MessageRow], now: int) -> list[Message]:
    """Lock rows for the entity's lock duration; the messages, with their locks."""
    until = now + ent.lock_duration_ms
    locked_until = stamp(until)
    updates = []
    out = []
    tokens = lock_tokens(len(rows))
    for r in rows:
        token = next(tokens)
        updates.append((token, until, r.id))
        m = to_message(r, delivered=True)
        m.lock_token = token
        m.locked_until = locked_until
        out.append(m)
    db.executemany(_LOCK, updates)
    return out


def take_deferred(
    db: sqlite3.Connection, ent: Entity, queue: Queue, sequence_numbers: Sequence[int], mode: ReceiveMode, now: int
) -> list[Message]:
    """Deferred messages by sequence number; MessageNotFound when one isn't deferred here."""
    out = []
    for seq in sequence_numbers:
        rows = message_rows(
            db, f"entity_id = ? AND queue = ? AND seq = ? AND state = {State.DEFERRED:d}", (ent.id, queue, seq)
        )
        if not rows:
            raise NotDeferred(seq)
        r = rows[0]
        if r.locked_until_ms is not None and r.locked_until_ms > now:
            raise DeferredLocked(seq)
        if mode is ReceiveMode.RECEIVE_AND_DELETE:
            db.execute("DELETE FROM message WHERE id = ?", (r.id,))
            out.append(to_message(r, delivered=True))
        else:
            out.extend(_lock(db, ent, [r], now))
    return out


def _on_held(
    db: sqlite3.Connection, head: str, tail: str, ent: Entity, queue: Queue, tokens: list[str], now: int
) -> Iterator[sqlite3.Cursor]:
    """`head WHERE <the lock is still held> tail` over the rows of `tokens`, one chunk at a time:
    the one statement of what a held lock is, for reading and for settling."""
    for chunk in chunks(tokens):
        yield db.execute(
            f"{head} WHERE lock_token IN ({marks(chunk)}) AND entity_id = ? AND queue = ? "
            f"AND locked_until_ms > ? {tail}",
            (*chunk, ent.id, queue, now),
        )


def held(
    db: sqlite3.Connection, ent: Entity, queue: Queue, tokens: Sequence[str], now: int
) -> tuple[list[LockRow], list[str]]:
    """Rows whose lock the caller still holds (in token order), and the tokens it has lost."""
    unique = list(dict.fromkeys(tokens))
    found: dict[str, LockRow] = {
        row.lock_token: row
        for cursor in _on_held(db, f"SELECT {LOCK_COLUMNS} FROM message", "", ent, queue, unique, now)
        for row in lock_rows(cursor)
    }
    return [found[t] for t in unique if t in found], [t for t in tokens if t not in found]


def complete_held(db: sqlite3.Connection, ent: Entity, queue: Queue, tokens: Sequence[str], now: int) -> list[str]:
    """Delete the rows whose lock the caller still holds (what `held` finds), in one statement
    per chunk; returns the tokens it has lost."""
    gone: set[str] = set()
    unique = list(dict.fromkeys(tokens))
    for cursor in _on_held(db, "DELETE FROM message", "RETURNING lock_token", ent, queue, unique, now):
        gone.update(map(itemgetter(0), cursor))
    return [] if len(gone) == len(unique) else [t for t in tokens if t not in gone]


def release(db: sqlite3.Connection, router: Router, ent: Entity, rows: Sequence[LockRow], now: int) -> None:
    """Locks ending without settlement (abandon, lapse).

    Main queue: past MaxDeliveryCount → DLQ; expired (and not deferred) → expiry; else
    available again. The DLQs have neither rule: their messages just become available.
    """
    over: list[int] = []
    expired: list[int] = []
    rest: list[int] = []
    mdc = ent.max_delivery_count
    for r in rows:
        if r.queue != Queue.MAIN:
            rest.append(r.id)
        elif r.delivery_count >= mdc:
            over.append(r.id)
        elif r.state == State.ACTIVE and r.expires_ms <= now:
            expired.append(r.id)
        else:
            rest.append(r.id)
    unlock(db, rest)
    router.dead_letter_ids(db, ent, over, max_deliveries(mdc), now)
    expire_ids(db, router, ent, expired, now)


def release_unprocessed(db: sqlite3.Connection, router: Router, ent: Entity, rows: Sequence[LockRow], now: int) -> None:
    """AMQP `released`: the lock ends and the delivery count is given back, except for a
    main-queue message already released MaxDeliveryCount times, which is abandoned (so a client
    that only ever releases still drives a poison message into the DLQ)."""
    ids = [r.id for r in rows]
    released: dict[int, int] = {}
    for chunk in chunks(ids):
        released.update(db.execute(f"SELECT id, releases FROM message WHERE id IN ({marks(chunk)})", chunk))
        db.execute(f"UPDATE message SET releases = releases + 1 WHERE id IN ({marks(chunk)})", chunk)
    mdc = ent.max_delivery_count
    charged = [r for r in rows if r.queue == Queue.MAIN and released.get(r.id, 0) >= mdc]
    unlock(db, [r.id for r in rows if r not in charged], undo_delivery=True)
    release(db, router, ent, charged, now)


def settle_lapsed(db: sqlite3.Connection, router: Router, ent: Entity, now: int) -> None:
    """Locks that lapsed since the last look: the broker's lock timer, run lazily."""
    rows = lock_rows(
        db.execute(
            f"SELECT {LOCK_COLUMNS} FROM message WHERE entity_id = ? AND locked_until_ms IS NOT NULL "
            "AND locked_until_ms <= ?",
            (ent.id, now),
        )
    )
    if rows:
        release(db, router, ent, rows, now)


def lapsed_exists(db: sqlite3.Connection, ent: Entity, now: int) -> bool:
    """Whether any of the entity's locks has lapsed (an indexed probe)."""
    row = db.execute(
        "SELECT 1 FROM message WHERE entity_id = ? AND locked_until_ms IS NOT NULL AND locked_until_ms <= ? LIMIT 1",
        (ent.id, now),
    ).fetchone()
    return row is not None


def unlock(db: sqlite3.Connection, ids: list[int], *, undo_delivery: bool = False) -> None:
    """Drop the rows' locks; undo_delivery also gives back the delivery count taken with it."""
    undo = ", delivery_count = MAX(delivery_count - 1, 0)" if undo_delivery else ""
    for chunk in chunks(ids):
        db.execute(
            f"UPDATE message SET lock_token = NULL, locked_until_ms = NULL{undo} WHERE id IN ({marks(chunk)})", chunk
        )


def defer(db: sqlite3.Connection, ids: list[int]) -> None:
    """Set rows aside: unlocked, deferred."""
    for chunk in chunks(ids):
        db.execute(
            f"UPDATE message SET state = {State.DEFERRED:d}, lock_token = NULL, locked_until_ms = NULL "
            f"WHERE id IN ({marks(chunk)})",
            chunk,
        )


def renew(db: sqlite3.Connection, ids: list[int], until: int) -> None:
    """Extend the rows' locks to until."""
    for chunk in chunks(ids):
        db.execute(f"UPDATE message SET locked_until_ms = ? WHERE id IN ({marks(chunk)})", (until, *chunk))


def modify(db: sqlite3.Connection, ids: list[int], properties: dict[str, Any]) -> None:
    """Merge properties into the rows' application properties (one read and one write per chunk)."""
    for chunk in chunks(ids):
        updates = []
        for i, text in db.execute(f"SELECT id, props FROM message WHERE id IN ({marks(chunk)})", chunk):
            props = load_props(text)
            props.update(properties)
            updates.append((dump_props(props), i))
        db.executemany("UPDATE message SET props = ? WHERE id = ?", updates)


def expire_ids(db: sqlite3.Connection, router: Router, ent: Entity, ids: list[int], now: int) -> None:
    """Expired main-queue rows: dead-lettered if the entity says so, else dropped."""
    if not ids:
        return
    if ent.dl_on_expiration:
        router.dead_letter_ids(db, ent, ids, EXPIRED, now)
        return
    delete_ids(db, ids)
