"""The emulator's SQLite store: schema, migrations, transactions, error translation.

One file, several processes (an operator and a cron job): WAL journal, a busy timeout,
and every write in BEGIN IMMEDIATE so two receivers never lock the same message.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sbdlq.errors import BadInput, OperationFailed, ServiceUnavailable, TransientError

# 2: partial indexes for the due-scheduled and lapsed-lock sweeps (created by re-running the schema).
# 3: session_lock (session locks and state), created the same way.
# 3 (also): entity.max_message_kb and message.releases (added to older stores by _COLUMNS).
# 4: both 3s above, made in parallel: a store stamped 3 by either gets the other's too.
# 5: message.amqp, the AMQP sections the other columns would lose (added by _COLUMNS).
# 6: rule.parameters and rule.action_parameters (added by _COLUMNS), and the filter types
#    true and false (the rules of text 1=1 and 1=0 that older stores kept as sql become them).
# 7: entity.created_ms, updated_ms and accessed_ms (added by _COLUMNS; an older store's
#    entities get the migration's time, the latest they can have been created).
SCHEMA_VERSION = 7
BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entity (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE COLLATE NOCASE,
    kind TEXT NOT NULL,                 -- queue | topic | subscription
    topic_id INTEGER,                   -- for subscriptions
    lock_duration_ms INTEGER NOT NULL,
    max_delivery_count INTEGER NOT NULL,
    default_ttl_ms INTEGER NOT NULL,
    dl_on_expiration INTEGER NOT NULL,
    dl_on_filter_exc INTEGER NOT NULL,
    requires_session INTEGER NOT NULL,
    requires_dup INTEGER NOT NULL,
    dup_window_ms INTEGER NOT NULL,
    forward_to TEXT,
    forward_dlq_to TEXT,
    status TEXT NOT NULL DEFAULT 'Active',
    max_size INTEGER,                   -- messages; NULL = unlimited
    max_message_kb INTEGER,             -- MaxMessageSizeInKilobytes; NULL = 256
    next_seq INTEGER NOT NULL DEFAULT 1,
    created_ms INTEGER NOT NULL DEFAULT 0,  -- CreatedAt, UpdatedAt and AccessedAt (epoch ms)
    updated_ms INTEGER NOT NULL DEFAULT 0,
    accessed_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS rule (
    id INTEGER PRIMARY KEY,
    entity_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    filter_type TEXT NOT NULL,          -- sql | true | false | correlation
    filter TEXT NOT NULL,               -- SQL text, or JSON of the correlation properties
    action TEXT,
    parameters TEXT,                    -- JSON of the filter's @parameters (property_json.py encoding)
    action_parameters TEXT,             -- JSON of the action's @parameters
    UNIQUE (entity_id, name)
);
CREATE TABLE IF NOT EXISTS message (
    id INTEGER PRIMARY KEY,
    entity_id INTEGER NOT NULL,
    queue INTEGER NOT NULL,             -- 0 main, 1 dead-letter, 2 transfer dead-letter
    seq INTEGER NOT NULL,
    state INTEGER NOT NULL,             -- 0 active, 1 deferred, 2 scheduled
    message_id TEXT,
    session_id TEXT,
    correlation_id TEXT,
    subject TEXT,
    content_type TEXT,
    reply_to TEXT,
    reply_to_session_id TEXT,
    to_ TEXT,
    partition_key TEXT,
    ttl_ms INTEGER,
    enqueued_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    scheduled_ms INTEGER,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    lock_token TEXT,
    locked_until_ms INTEGER,
    dl_source TEXT,
    hops INTEGER NOT NULL DEFAULT 0,
    props TEXT,
    body BLOB NOT NULL,
    body_type TEXT NOT NULL DEFAULT 'data',
    releases INTEGER NOT NULL DEFAULT 0, -- AMQP `released` outcomes (free up to MaxDeliveryCount)
    amqp BLOB                           -- encoded AMQP sections kept as sent (typed properties, ...)
);
CREATE INDEX IF NOT EXISTS message_order ON message (entity_id, queue, state, seq);
CREATE UNIQUE INDEX IF NOT EXISTS message_lock ON message (lock_token) WHERE lock_token IS NOT NULL;
-- Partial indexes stay small (only scheduled or locked rows) and cost a plain send nothing.
CREATE INDEX IF NOT EXISTS message_due ON message (scheduled_ms) WHERE state = 2;
CREATE INDEX IF NOT EXISTS message_locked ON message (entity_id, locked_until_ms) WHERE locked_until_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS dedup (
    entity_id INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    seen_ms INTEGER NOT NULL,
    PRIMARY KEY (entity_id, message_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_lock (
    entity_id INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    holder TEXT,                        -- the receiver holding the session; NULL = free
    locked_until_ms INTEGER NOT NULL DEFAULT 0,
    state BLOB,                         -- the session state; NULL = none
    updated_ms INTEGER NOT NULL,        -- when the state was last set (0 = never)
    PRIMARY KEY (entity_id, session_id)
) WITHOUT ROWID;
"""


# Columns added after version 2: (table, column, declaration), added where a store lacks them.
_COLUMNS = (
    ("entity", "max_message_kb", "INTEGER"),
    ("message", "releases", "INTEGER NOT NULL DEFAULT 0"),
    ("message", "amqp", "BLOB"),
    ("rule", "parameters", "TEXT"),
    ("rule", "action_parameters", "TEXT"),
    ("entity", "created_ms", "INTEGER NOT NULL DEFAULT 0"),
    ("entity", "updated_ms", "INTEGER NOT NULL DEFAULT 0"),
    ("entity", "accessed_ms", "INTEGER NOT NULL DEFAULT 0"),
)


def _migrate_columns(conn: sqlite3.Connection) -> None:
    """Add the columns an older store lacks, and stamp the schema version, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read inside the transaction: another process may have migrated the store meanwhile.
        for table, column, declaration in _COLUMNS:
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        if conn.execute("PRAGMA user_version").fetchone()[0] < 6:
            # Before 6 a TrueFilter (every default rule) was stored as sql 1=1, and shown as one.
            conn.execute("UPDATE rule SET filter_type = 'true' WHERE filter_type = 'sql' AND filter = '1=1'")
            conn.execute("UPDATE rule SET filter_type = 'false' WHERE filter_type = 'sql' AND filter = '1=0'")
        if conn.execute("PRAGMA user_version").fetchone()[0] < 7:
            # Entities from before 7 have no times: the migration's is the latest they can have.
            now = int(time.time() * 1000)
            conn.execute("UPDATE entity SET created_ms = ?, updated_ms = ?, accessed_ms = ?", (now, now, now))
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _primary_code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code of an error (extended codes carry it in the low byte)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


# Result codes by what they mean to an operator (https://sqlite.org/rescode.html).
_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_NOT_A_STORE = frozenset({sqlite3.SQLITE_NOTADB})
_CANNOT_OPEN = frozenset({sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY})


def translate(exc: sqlite3.Error, path: str) -> Exception:
    """Rename a sqlite3 error as an sbdlq error (the edge of the store), by its result code."""
    code = _primary_code(exc)
    if code in _BUSY:
        return TransientError(f"emulator store {path} is busy", hint="another sbdlq process holds it; try again")
    if code in _NOT_A_STORE:
        return BadInput(f"{path} is not an sbdlq emulator store")
    if code == sqlite3.SQLITE_CORRUPT:
        # A store damaged inside (a torn copy, a disk fault): the operation failed; not a usage error.
        return OperationFailed(
            f"emulator store {path} is corrupt ({exc})",
            hint="restore it from a copy, or start again with `sbdlq emulator reset --yes` / `emulator init`",
        )
    if code in _CANNOT_OPEN:
        return BadInput(f"cannot open emulator store {path}", hint="check the path and its permissions")
    if code == sqlite3.SQLITE_FULL:
        return OperationFailed(f"emulator store {path}: disk full")
    return OperationFailed(f"emulator store {path}: {exc}")


def _is_busy(exc: sqlite3.Error) -> bool:
    return _primary_code(exc) in _BUSY


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating if needed) the store and bring its schema up to date."""
    p = str(path)
    if p != ":memory:":
        Path(p).expanduser().parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(p, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            # One immediate transaction: two processes creating the store at once both succeed.
            conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
            _migrate_columns(conn)
        elif version > SCHEMA_VERSION:
            raise BadInput(f"{p} was written by a newer sbdlq (schema {version})", hint="upgrade sbdlq")
    except sqlite3.Error as exc:
        raise translate(exc, p) from None
    return conn


class Store:
    """A connection with nested write transactions (BEGIN IMMEDIATE at the outermost)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float | None = None) -> None:
        self.path = str(path)
        #: how long a write waits for another process's write to end before the call fails
        self.busy_timeout_s = BUSY_TIMEOUT_S if busy_timeout_s is None else busy_timeout_s
        self.conn = connect(path)
        self._depth = 0
        # One connection, one transaction at a time: a backend calling the engine from
        # worker threads must not join (or read inside) another thread's transaction.
        self._lock = threading.RLock()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; nested calls join the outer one."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.conn
                finally:
                    self._depth -= 1
                return
            self._begin()
            self._depth = 1
            try:
                yield self.conn
            except BaseException as exc:
                self._depth = 0
                try:
                    self.conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if isinstance(exc, sqlite3.Error):
                    raise translate(exc, self.path) from None
                raise
            else:
                self._depth = 0
                try:
                    self.conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    # A failed COMMIT may leave the transaction open: roll it back so the
                    # next call starts clean.
                    if self.conn.in_transaction:
                        try:
                            self.conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise translate(exc, self.path) from None

    def _begin(self) -> None:
        """BEGIN IMMEDIATE, waiting up to busy_timeout_s for another process's write to end; past
        it, ServiceUnavailable, not a TransientError: the caller's retries must not wait it again
        (the user's --timeout bounds the whole wait).

        SQLite's own busy handler sleeps in growing steps (up to 100 ms), so a process
        looping on short transactions keeps the lock while the others sleep: a cron
        `count` could starve behind an operator's resubmit. Retrying here with short,
        jittered sleeps gives every waiter its turn.
        """
        conn = self.conn
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.0002
        conn.execute("PRAGMA busy_timeout=0")
        try:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        raise translate(exc, self.path) from None
                    if time.monotonic() >= deadline:
                        raise ServiceUnavailable(
                            f"emulator store {self.path} stayed busy for {self.busy_timeout_s:g}s",
                            hint="another process holds its write lock; try again when it is done",
                        ) from None
                except sqlite3.Error as exc:
                    raise translate(exc, self.path) from None
                time.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 1.5, 0.004)
        finally:
            # Reads and COMMIT keep SQLite's own (long) wait for the rare checkpoint lock.
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """Reads; sqlite3 errors renamed."""
        with self._lock:
            try:
                yield self.conn
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from None

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self.conn.close()
