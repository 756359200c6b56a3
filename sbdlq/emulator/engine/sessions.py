"""Session locks and session state: one row per (entity, session id) in `session_lock`.

A session is held by one receiver (a holder token the caller picks) until its lock lapses
or the holder lets it go; the lock lives in the store, so several processes sharing it
see the same holders. Nothing here sleeps: a lapsed lock is simply one whose
locked_until_ms is in the past.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime

from .errors import NoSessionAvailable, SessionCannotBeLocked, SessionLockLost
from .vocabulary import Entity, Queue, State


@dataclass(frozen=True, slots=True)
class SessionRow:
    """What the store knows of one session."""

    holder: str | None
    locked_until_ms: int
    state: bytes | None
    updated_ms: int


@dataclass(frozen=True, slots=True)
class AcceptedSession:
    """A session a receiver now holds, and until when."""

    session_id: str
    locked_until: datetime


_COLUMNS = "holder, locked_until_ms, state, updated_ms"


def find(db: sqlite3.Connection, ent: Entity, session_id: str) -> SessionRow | None:
    """The session's row, or None when nothing was ever recorded for it."""
    row = db.execute(
        f"SELECT {_COLUMNS} FROM session_lock WHERE entity_id = ? AND session_id = ?", (ent.id, session_id)
    ).fetchone()
    if row is None:
        return None
    holder, until, state, updated = row
    return SessionRow(holder, int(until or 0), None if state is None else bytes(state), int(updated or 0))


def _is_held(row: SessionRow | None, now: int) -> bool:
    return row is not None and row.holder is not None and row.locked_until_ms > now


def next_free(db: sqlite3.Connection, ent: Entity, now: int) -> str:
    """The session of the oldest receivable message whose session nobody holds; NoSessionAvailable."""
    row = db.execute(
        "SELECT m.session_id FROM message m WHERE m.entity_id = ? "
        f"AND m.queue = {Queue.MAIN:d} AND m.state = {State.ACTIVE:d} AND m.session_id IS NOT NULL "
        "AND (m.locked_until_ms IS NULL OR m.locked_until_ms <= ?) AND m.expires_ms > ? "
        "AND NOT EXISTS (SELECT 1 FROM session_lock s WHERE s.entity_id = m.entity_id "
        "AND s.session_id = m.session_id AND s.holder IS NOT NULL AND s.locked_until_ms > ?) "
        "ORDER BY m.seq LIMIT 1",
        (ent.id, now, now, now),
    ).fetchone()
    if row is None:
        raise NoSessionAvailable()
    return str(row[0])


def lock(db: sqlite3.Connection, ent: Entity, session_id: str, holder: str, now: int) -> int:
    """Give the session to holder for the entity's lock duration; SessionCannotBeLocked when
    another holder has it. Returns the lock's end (epoch ms)."""
    row = find(db, ent, session_id)
    if _is_held(row, now) and row is not None and row.holder != holder:
        raise SessionCannotBeLocked(session_id)
    until = now + ent.lock_duration_ms
    db.execute(
        "INSERT INTO session_lock (entity_id, session_id, holder, locked_until_ms, updated_ms) "
        "VALUES (?, ?, ?, ?, 0) ON CONFLICT (entity_id, session_id) "
        "DO UPDATE SET holder = excluded.holder, locked_until_ms = excluded.locked_until_ms",
        (ent.id, session_id, holder, until),
    )
    return until


def check_held(db: sqlite3.Connection, ent: Entity, session_id: str, holder: str | None, now: int) -> SessionRow:
    """The session's row when its lock is live (and, with a holder, held by it); else SessionLockLost."""
    row = find(db, ent, session_id)
    if row is None or not _is_held(row, now) or (holder is not None and row.holder != holder):
        raise SessionLockLost(session_id)
    return row


def renew(db: sqlite3.Connection, ent: Entity, session_id: str, holder: str | None, now: int) -> int:
    """Extend a live session lock by the lock duration, with its messages' locks; the new end (epoch ms)."""
    check_held(db, ent, session_id, holder, now)
    until = now + ent.lock_duration_ms
    db.execute(
        "UPDATE session_lock SET locked_until_ms = ? WHERE entity_id = ? AND session_id = ?",
        (until, ent.id, session_id),
    )
    bind_message_locks(db, ent, session_id, until, now)
    return until


def bind_message_locks(db: sqlite3.Connection, ent: Entity, session_id: str, until: int, now: int) -> None:
    """Make the session's locked messages end with the session lock, as the broker does: a
    message taken through a session is held as long as the session is."""
    db.execute(
        f"UPDATE message SET locked_until_ms = ? WHERE entity_id = ? AND queue = {Queue.MAIN:d} "
        "AND session_id = ? AND lock_token IS NOT NULL AND locked_until_ms > ?",
        (until, ent.id, session_id, now),
    )


def unlock(db: sqlite3.Connection, ent: Entity, session_id: str, holder: str) -> None:
    """Let the session go, if holder still has it (a closing receiver)."""
    db.execute(
        "UPDATE session_lock SET holder = NULL, locked_until_ms = 0 "
        "WHERE entity_id = ? AND session_id = ? AND holder = ?",
        (ent.id, session_id, holder),
    )


def set_state(db: sqlite3.Connection, ent: Entity, session_id: str, state: bytes | None, now: int) -> None:
    """Store (or, with None, clear) the session's state; stamps its last update."""
    db.execute(
        "UPDATE session_lock SET state = ?, updated_ms = ? WHERE entity_id = ? AND session_id = ?",
        (state, now, ent.id, session_id),
    )


def listed(db: sqlite3.Connection, ent: Entity, updated_after_ms: int | None, skip: int, top: int) -> list[str]:
    """Session ids, sorted: with updated_after_ms, those whose state was set (or cleared) after it; otherwise
    those with messages in the main queue or a stored state."""
    if updated_after_ms is not None:
        sql = "SELECT session_id FROM session_lock WHERE entity_id = ? AND updated_ms > ?"
        args: tuple[int, ...] = (ent.id, updated_after_ms)
    else:
        sql = (
            "SELECT session_id FROM session_lock WHERE entity_id = ? AND state IS NOT NULL UNION "
            f"SELECT DISTINCT session_id FROM message WHERE entity_id = ? AND queue = {Queue.MAIN:d} "
            "AND session_id IS NOT NULL"
        )
        args = (ent.id, ent.id)
    rows = db.execute(f"SELECT session_id FROM ({sql}) ORDER BY session_id LIMIT ? OFFSET ?", (*args, top, skip))
    return [str(r[0]) for r in rows]
