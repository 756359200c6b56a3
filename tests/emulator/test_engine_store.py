"""The store under the engine: threads sharing one engine, schema upgrade, a busy store."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.emulator import store
from sbdlq.emulator.engine import Engine
from sbdlq.errors import BadInput, OperationFailed, SbdlqError, ServiceUnavailable, TransientError
from sbdlq.models import OutboundMessage


def _as_written_by(path: Path, version: int, *undo: str) -> None:
    """Turn the store at `path` back into what schema `version` wrote: run the `undo` SQL, stamp the version."""
    conn = sqlite3.connect(path)
    for statement in undo:
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version={version}")
    conn.commit()
    conn.close()


def _schema_version(engine: Engine) -> int:
    return int(engine.store.conn.execute("PRAGMA user_version").fetchone()[0])


def test_threads_sharing_one_engine_never_share_a_message(tmp_path: Path) -> None:
    # A backend may call the engine from worker threads: one connection, one transaction at a time.
    engine = Engine(tmp_path / "t.db")
    engine.create_queue("q", lock_duration_s=300)
    engine.send("q", [OutboundMessage(body=b"x", message_id=f"m{i}") for i in range(1500)])
    got: list[list[str]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def work(slot: int) -> None:
        try:
            while True:
                batch = engine.receive(A("q"), 7 + slot)
                if not batch:
                    return
                got[slot].extend(str(m.message_id) for m in batch)
                assert engine.complete(A("q"), [str(m.lock_token) for m in batch]) == []
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    engine.close()
    assert errors == []
    everything = [i for ids in got for i in ids]
    assert len(everything) == len(set(everything)) == 1500


def test_a_version_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with Engine(path) as engine:
        engine.create_queue("q")
        engine.send("q", [OutboundMessage(body=b"kept")])
    _as_written_by(path, 1, "DROP INDEX message_due", "DROP INDEX message_locked")
    with Engine(path) as engine:
        assert engine.peek(A("q"), 0, 1)[0].body == b"kept"
        names = {r[0] for r in engine.store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"message_due", "message_locked"} <= names
        assert _schema_version(engine) == store.SCHEMA_VERSION


def test_a_version_2_store_gains_the_size_limit_and_release_columns(tmp_path: Path) -> None:
    """Stores written before max message sizes keep their entities and messages (256 KB limit)."""
    path = tmp_path / "v2.db"
    with Engine(path) as engine:
        engine.create_queue("q", max_delivery_count=1)
    _as_written_by(path, 2, "ALTER TABLE entity DROP COLUMN max_message_kb", "ALTER TABLE message DROP COLUMN releases")
    with Engine(path) as engine:
        engine.send("q", [OutboundMessage(body=b"kept")])
        assert engine.max_message_bytes("q") == 256 * 1024
        (m,) = engine.receive(A("q"), 1)
        engine.release(A("q"), [m.lock_token or ""])
        assert engine.peek(A("q"), 0, 1)[0].body == b"kept"
        assert _schema_version(engine) == store.SCHEMA_VERSION


def test_a_version_5_store_gains_rule_parameters_and_true_false_types(tmp_path: Path) -> None:
    """Before 6 a TrueFilter (the default rule) was kept as sql 1=1: it becomes the true type."""
    from sbdlq.emulator.engine import Rule

    path = tmp_path / "v5.db"
    with Engine(path) as engine:
        engine.create_topic("t")
        engine.create_subscription("t", "s")
        engine.add_rule("t/Subscriptions/s", Rule("other", sql="a = 1"))
    _as_written_by(
        path,
        5,
        "ALTER TABLE rule DROP COLUMN parameters",
        "ALTER TABLE rule DROP COLUMN action_parameters",
        "UPDATE rule SET filter_type = 'sql'",
    )
    with Engine(path) as engine:
        rules = engine.rules("t/Subscriptions/s")
        assert [(r.name, r.sql, r.constant, r.parameters) for r in rules] == [
            ("$Default", "1=1", True, None),
            ("other", "a = 1", None, None),
        ]
        engine.add_rule("t/Subscriptions/s", Rule("p", sql="a = @a", parameters={"@a": 1}))
        assert engine.rules("t/Subscriptions/s")[-1].parameters == {"@a": 1}
        assert _schema_version(engine) == store.SCHEMA_VERSION


def test_a_newer_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    Engine(path).close()
    _as_written_by(path, store.SCHEMA_VERSION + 1)
    with pytest.raises(SbdlqError, match="newer sbdlq"):
        Engine(path)


def test_a_store_held_too_long_fails_the_call_without_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the busy timeout the write fails with ServiceUnavailable, not a TransientError: a
    caller's retries must not wait the whole timeout again (`--timeout 5s` took 181 s)."""
    path = tmp_path / "busy.db"
    engine = Engine(path, busy_timeout_s=0.2)
    engine.create_queue("q")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(ServiceUnavailable, match=r"stayed busy for 0\.2s") as raised:
            engine.send("q", [OutboundMessage(body=b"x")])
        assert not isinstance(raised.value, TransientError)
        # Reads don't wait for a writer (WAL).
        assert engine.counts("q").active == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    engine.send("q", [OutboundMessage(body=b"x")])
    assert engine.counts("q").active == 1
    engine.close()


def test_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(SbdlqError, match="not an sbdlq emulator store"):
        Engine(path)


@pytest.mark.parametrize(
    ("code", "kind", "text"),
    [
        (sqlite3.SQLITE_BUSY, TransientError, "is busy"),
        (517, TransientError, "is busy"),  # SQLITE_BUSY_SNAPSHOT: an extended code
        (sqlite3.SQLITE_LOCKED, TransientError, "is busy"),
        (sqlite3.SQLITE_NOTADB, BadInput, "not an sbdlq emulator store"),
        (sqlite3.SQLITE_CORRUPT, OperationFailed, "is corrupt"),
        (sqlite3.SQLITE_CANTOPEN, BadInput, "cannot open emulator store"),
        (sqlite3.SQLITE_READONLY, BadInput, "cannot open emulator store"),
        (sqlite3.SQLITE_FULL, OperationFailed, "disk full"),
        (sqlite3.SQLITE_IOERR, OperationFailed, "s.db: the driver's own words"),
    ],
)
def test_sqlite_errors_are_told_apart_by_their_result_code(code: int, kind: type[SbdlqError], text: str) -> None:
    # The driver's message names none of the cases: only the code may decide.
    exc = sqlite3.OperationalError("the driver's own words")
    exc.sqlite_errorcode = code
    renamed = store.translate(exc, "s.db")
    assert type(renamed) is kind
    assert text in str(renamed)


def test_a_failed_call_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    from sbdlq.errors import BadInput

    with Engine(tmp_path / "a.db") as engine:
        engine.create_queue("q")
        with pytest.raises(BadInput):
            engine.send("q", [OutboundMessage(body=b"ok"), OutboundMessage(body=b"bad", time_to_live_s=-1)])
        assert engine.counts("q").active == 0
        assert engine.send("q", [OutboundMessage(body=b"ok")]) == [1]  # the numbers were not used up


def test_a_version_3_store_gains_the_amqp_column(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    with Engine(path) as engine:
        engine.create_queue("q")
        engine.send("q", [OutboundMessage(body=b"old")])
    _as_written_by(path, 3, "ALTER TABLE message DROP COLUMN amqp")
    with Engine(path) as engine:
        engine.send("q", [OutboundMessage(body=b"new", amqp=b"\x00Sx\xc1\x01\x00")])
        old, new = engine.peek(A("q"), 0, 2)
        assert (old.body, old.amqp) == (b"old", None)
        assert (new.body, new.amqp) == (b"new", b"\x00Sx\xc1\x01\x00")
        assert _schema_version(engine) == store.SCHEMA_VERSION


def test_kept_amqp_sections_follow_the_message_everywhere(tmp_path: Path) -> None:
    blob = b"\x00Sx\xc1\x01\x00"  # an empty footer: opaque to the engine
    with Engine(tmp_path / "kept.db") as engine:
        engine.create_queue("dest")
        engine.create_topic("t")
        engine.create_subscription("t", "s", forward_to="dest")
        engine.create_subscription("t", "plain")
        engine.send("t", [OutboundMessage(body=b"b", amqp=blob)])
        assert engine.peek(A("t/Subscriptions/plain"), 0, 1)[0].amqp == blob
        (forwarded,) = engine.receive(A("dest"), 1)
        assert forwarded.amqp == blob
        engine.dead_letter(A("dest"), [forwarded.lock_token or ""], reason="r")
        assert engine.peek(A("dest/$DeadLetterQueue"), 0, 1)[0].amqp == blob


def test_a_version_6_store_gains_entity_times_stamped_at_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    with Engine(path, clock=lambda: 1_000.0) as engine:
        engine.create_queue("q")
    _as_written_by(
        path,
        6,
        "ALTER TABLE entity DROP COLUMN created_ms",
        "ALTER TABLE entity DROP COLUMN updated_ms",
        "ALTER TABLE entity DROP COLUMN accessed_ms",
    )
    before = time.time()
    with Engine(path) as engine:
        info = engine.get_entity("q")
        assert info.created_at is not None and info.created_at.timestamp() >= before - 1
        assert info.created_at == info.updated_at == info.accessed_at
        assert _schema_version(engine) == store.SCHEMA_VERSION


def test_entity_times_are_kept_created_once_updated_on_change_accessed_on_use(tmp_path: Path) -> None:
    """CreatedAt, UpdatedAt and AccessedAt are stored, not the time of the request that reads them."""
    now = [1_000.0]
    with Engine(tmp_path / "t.db", clock=lambda: now[0]) as engine:
        engine.create_queue("q")
        engine.create_topic("t")
        engine.create_subscription("t", "s")

        def times(path: str) -> tuple[float, float, float]:
            info = engine.get_entity(path)
            assert info.created_at and info.updated_at and info.accessed_at
            return info.created_at.timestamp(), info.updated_at.timestamp(), info.accessed_at.timestamp()

        now[0] = 2_000.0
        assert times("q") == (1_000.0, 1_000.0, 1_000.0)  # reading is not a use
        engine.create_queue("q", exist_ok=True, max_delivery_count=3)
        assert times("q") == (1_000.0, 2_000.0, 1_000.0)
        now[0] = 3_000.0
        engine.send("q", [OutboundMessage(body=b"x")])
        engine.send("t", [OutboundMessage(body=b"y")])
        assert times("q") == (1_000.0, 2_000.0, 3_000.0)
        assert times("t") == (1_000.0, 1_000.0, 3_000.0)
        now[0] = 4_000.0
        engine.peek(A("q"), 0, 5)
        assert times("q")[2] == 3_000.0
        assert [m.body for m in engine.receive(A("t/Subscriptions/s"), 5)] == [b"y"]
        assert times("t/Subscriptions/s") == (1_000.0, 1_000.0, 4_000.0)
        assert engine.receive(A("q/$DeadLetterQueue"), 5) == []
        assert times("q")[2] == 3_000.0  # nothing taken: not a use
