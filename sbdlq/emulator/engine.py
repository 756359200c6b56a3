"""Service Bus semantics (DESIGN §6) over the SQLite store. No CLI, no asyncio.

The rules live here; the backends and the AMQP listener are thin layers above. Every
method is one transaction, so a process killed at any line leaves the store as it was
before or after the call, and several processes may share one store. (counts and peek
may first run a short transaction of their own to settle what the broker does on its
timers: scheduled messages falling due, locks lapsing.)
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sbdlq.backends.base import ReceiveMode
from sbdlq.errors import (
    BadInput,
    EntityDisabled,
    EntityNotFound,
    InvalidOperation,
    MessageNotFound,
    QuotaExceeded,
)
from sbdlq.models import (
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    MAX_TTL_S,
    Counts,
    EntityInfo,
    Message,
    OutboundMessage,
)
from sbdlq.paths import Address, EntityPath, SubQueue, parse_address, validate_name
from sbdlq.timeparse import from_epoch_ms, to_epoch_ms

from .props import dump_props, encode_props, load_props
from .store import Store

MAX_HOPS = 4
HEADER_LIMIT = 64 * 1024
# 9999-12-31T23:59:59Z: the broker's DateTime.MaxValue, where "never expires" lands.
MAX_TIME_MS = 253402300799000
_QUEUE = {SubQueue.NONE: 0, SubQueue.DEAD_LETTER: 1, SubQueue.TRANSFER_DEAD_LETTER: 2}
_STATE_NAMES = {0: "active", 1: "deferred", 2: "scheduled"}
_CHUNK = 500  # bound on SQL variables per statement

_NEVER_MS = int(MAX_TTL_S * 1000)
_UPKEEP_EVERY_MS = 1000
MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
TTL_REASON = "TTLExpiredException"
TTL_DESCRIPTION = "The message expired and was dead lettered."
SESSION_REASON = "Session id is null."
SESSION_DESCRIPTION = "Session enabled entity doesn't allow a message whose session identifier is null."
HEADER_REASON = "HeaderSizeExceeded"
HEADER_DESCRIPTION = "The size quota for this stream has been exceeded."
HOPS_REASON = "MaxTransferHopCountExceeded"
# Microsoft's table gives no description for this reason (DeadLetterErrorDescription is null).
HOPS_DESCRIPTION: str | None = None

_COLUMNS = (
    "id, seq, state, message_id, session_id, correlation_id, subject, content_type, reply_to, "
    "reply_to_session_id, to_, partition_key, ttl_ms, enqueued_ms, expires_ms, scheduled_ms, "
    "delivery_count, lock_token, locked_until_ms, dl_source, hops, props, body, body_type"
)
# A message with only an id, a body and application properties, sent to a main queue.
_INSERT_SLIM = (
    "INSERT INTO message (entity_id, queue, seq, state, message_id, ttl_ms, enqueued_ms, expires_ms, "
    "delivery_count, hops, props, body, body_type) VALUES (?, 0, ?, 0, ?, ?, ?, ?, 0, 0, ?, ?, ?)"
)
_OPTIONAL_COLS = ("session_id", "correlation_id", "subject", "content_type", "reply_to", "reply_to_session_id",
                  "to_", "partition_key")  # fmt: skip


@functools.lru_cache(maxsize=256)
def _insert_shaped(shape: tuple[bool, ...]) -> str:
    """The insert of a plain message that sets the optional columns marked in `shape`."""
    cols = [c for c, present in zip(_OPTIONAL_COLS, shape, strict=True) if present]
    names = "".join(f"{c}, " for c in cols)
    marks = "?, " * len(cols)
    return (
        f"INSERT INTO message (entity_id, queue, seq, state, message_id, {names}ttl_ms, enqueued_ms, expires_ms, "
        f"delivery_count, hops, props, body, body_type) VALUES (?, 0, ?, 0, ?, {marks}?, ?, ?, 0, 0, ?, ?, ?)"
    )


# What deciding a lock's end needs: see Engine._release.
_RELEASE_COLS = "id, queue, state, delivery_count, expires_ms"
_INSERT = (
    "INSERT INTO message (entity_id, queue, seq, state, message_id, session_id, correlation_id, "
    "subject, content_type, reply_to, reply_to_session_id, to_, partition_key, ttl_ms, enqueued_ms, "
    "expires_ms, scheduled_ms, delivery_count, dl_source, hops, props, body, body_type) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


@dataclass(slots=True)
class Rule:
    """A subscription rule: a SQL or correlation filter, and an optional SQL action."""

    name: str
    sql: str | None = None
    correlation: dict[str, Any] | None = None
    action: str | None = None

    @staticmethod
    def true(name: str = "$Default") -> Rule:
        return Rule(name=name, sql="1=1")


@dataclass(slots=True)
class _Entity:
    id: int
    path: str
    kind: str
    topic_id: int | None
    lock_duration_ms: int
    max_delivery_count: int
    default_ttl_ms: int
    dl_on_expiration: bool
    dl_on_filter_exc: bool
    requires_session: bool
    requires_dup: bool
    dup_window_ms: int
    forward_to: str | None
    forward_dlq_to: str | None
    status: str
    max_size: int | None


@dataclass(slots=True)
class _Draft:
    """A message on its way into an entity: everything stored but the broker's bookkeeping."""

    body: bytes
    message_id: str | None = None
    session_id: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    content_type: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    to: str | None = None
    partition_key: str | None = None
    ttl_ms: int | None = None
    scheduled_ms: int | None = None
    props: dict[str, Any] = field(default_factory=dict)
    body_type: str = "data"
    hops: int = 0
    dl_source: str | None = None
    seq: int | None = None  # set when a topic assigned it
    enqueued_ms: int | None = None  # a materialised scheduled message: its scheduled time

    def copy(self, **changes: Any) -> _Draft:
        """A copy with its own application properties (dataclasses.replace is slow on a hot path)."""
        d = _Draft(
            self.body,
            self.message_id,
            self.session_id,
            self.correlation_id,
            self.subject,
            self.content_type,
            self.reply_to,
            self.reply_to_session_id,
            self.to,
            self.partition_key,
            self.ttl_ms,
            self.scheduled_ms,
            dict(self.props),
            self.body_type,
            self.hops,
            self.dl_source,
            self.seq,
            self.enqueued_ms,
        )
        for k, v in changes.items():
            setattr(d, k, v)
        return d

    @staticmethod
    def of(m: OutboundMessage, message_id: str | None = None) -> _Draft:
        ttl = None if m.time_to_live_s is None else _ttl_ms(m.time_to_live_s)
        sched = None if m.scheduled_enqueue_time is None else to_epoch_ms(m.scheduled_enqueue_time)
        return _Draft(
            body=bytes(m.body),
            message_id=m.message_id if m.message_id is not None else (message_id or _new_message_id()),
            session_id=m.session_id,
            correlation_id=m.correlation_id,
            subject=m.subject,
            content_type=m.content_type,
            reply_to=m.reply_to,
            reply_to_session_id=m.reply_to_session_id,
            to=m.to,
            partition_key=m.partition_key,
            ttl_ms=ttl,
            scheduled_ms=sched,
            props=dict(m.application_properties),
            body_type=m.body_type,
        )

    def header_size(self) -> int:
        """Approximate encoded size of properties and application properties."""
        return _header_size(
            (
                self.message_id,
                self.session_id,
                self.correlation_id,
                self.subject,
                self.content_type,
                self.reply_to,
                self.reply_to_session_id,
                self.to,
                self.partition_key,
            ),
            self.props,
        )

    def system(self) -> dict[str, Any]:
        """System properties by their SQL filter names."""
        return {
            "MessageId": self.message_id,
            "SessionId": self.session_id,
            "CorrelationId": self.correlation_id,
            "Label": self.subject,
            "ContentType": self.content_type,
            "ReplyTo": self.reply_to,
            "ReplyToSessionId": self.reply_to_session_id,
            "To": self.to,
            "PartitionKey": self.partition_key,
            "Size": len(self.body),
        }

    def take_system(self, system: dict[str, Any]) -> None:
        """Write back what a SQL action set."""
        self.message_id = system.get("MessageId")
        self.session_id = system.get("SessionId")
        self.correlation_id = system.get("CorrelationId")
        self.subject = system.get("Label")
        self.content_type = system.get("ContentType")
        self.reply_to = system.get("ReplyTo")
        self.reply_to_session_id = system.get("ReplyToSessionId")
        self.to = system.get("To")


def _bool(v: Any) -> int:
    return 1 if v else 0


def _ms(seconds: float | None, default_ms: int) -> int:
    if seconds is None:
        return default_ms
    if seconds <= 0:
        raise BadInput("durations must be positive")
    return int(round(min(seconds, MAX_TTL_S) * 1000))


class Engine:
    """A Service Bus namespace held in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str], *, clock: Callable[[], float] | None = None) -> None:
        self.path = os.fspath(path)
        self.store = Store(self.path)
        self.clock = clock or time.time
        self._compiled: dict[tuple[str, str], Any] = {}
        self._upkeep_at: dict[int, int] = {}
        self._dedup_pruned: dict[int, int] = {}

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _now(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------------ entities

    def create_queue(self, name: str, *, exist_ok: bool = False, **props: Any) -> EntityInfo:
        """Create a queue (or, with exist_ok, update its properties)."""
        validate_name(name, what="queue")
        return self._create(name, "queue", None, exist_ok, props)

    def create_topic(self, name: str, *, exist_ok: bool = False, **props: Any) -> EntityInfo:
        """Create a topic (or, with exist_ok, update its properties)."""
        validate_name(name, what="topic")
        return self._create(name, "topic", None, exist_ok, props)

    def create_subscription(
        self, topic: str, name: str, *, rules: list[Rule] | None = None, exist_ok: bool = False, **props: Any
    ) -> EntityInfo:
        """Create a subscription with its rules (default: one rule that takes everything).

        With exist_ok and no rules, an existing subscription keeps the rules it has.
        """
        path = str(EntityPath(topic, name))
        parse_address(path)  # validates both names
        checked = [self._check_rule(r) for r in rules] if rules is not None else None
        with self.store.write() as db:
            topic_ent = self._entity_by_path(db, topic)
            if topic_ent.kind != "topic":
                raise BadInput(f"{topic!r} is a {topic_ent.kind}, not a topic")
            existed = db.execute("SELECT 1 FROM entity WHERE path = ?", (path,)).fetchone() is not None
            info = self._create(path, "subscription", topic_ent.id, exist_ok, props)
            if checked is None:
                if existed:
                    return info
                checked = [Rule.true()]
            ent = self._entity_by_path(db, path)
            db.execute("DELETE FROM rule WHERE entity_id = ?", (ent.id,))
            for r in checked:
                db.execute(
                    "INSERT INTO rule (entity_id, name, filter_type, filter, action) VALUES (?,?,?,?,?)",
                    (
                        ent.id,
                        r.name,
                        "correlation" if r.correlation is not None else "sql",
                        json.dumps(r.correlation) if r.correlation is not None else (r.sql or "1=1"),
                        r.action,
                    ),
                )
        return info

    def _check_rule(self, rule: Rule) -> Rule:
        validate_name(rule.name.lstrip("$") or "x", what="rule")
        if rule.correlation is not None:
            _compile_correlation(rule.correlation)
        elif _constant_filter(rule.sql or "1=1") is None:
            from sbdlq.sqlfilter import compile_filter

            compile_filter(rule.sql or "1=1")
        if rule.action:
            from sbdlq.sqlfilter import compile_action

            compile_action(rule.action)
        return rule

    def _create(self, path: str, kind: str, topic_id: int | None, exist_ok: bool, p: dict[str, Any]) -> EntityInfo:
        known = {
            "lock_duration_s",
            "max_delivery_count",
            "default_ttl_s",
            "dead_lettering_on_expiration",
            "dead_lettering_on_filter_exceptions",
            "requires_session",
            "requires_duplicate_detection",
            "duplicate_window_s",
            "forward_to",
            "forward_dead_lettered_to",
            "status",
            "max_size",
        }
        unknown = set(p) - known
        if unknown:
            raise BadInput(f"unknown entity properties: {', '.join(sorted(unknown))}")
        mdc = int(p.get("max_delivery_count", 10))
        if mdc < 1:
            raise BadInput("MaxDeliveryCount must be at least 1")
        status = p.get("status", "Active")
        if status not in ("Active", "Disabled"):
            raise BadInput(f"invalid status {status!r}: Active or Disabled")
        for key in ("forward_to", "forward_dead_lettered_to"):
            if p.get(key):
                validate_name(str(p[key]), what=key.replace("_", " ") + " destination")
        row = (
            kind,
            topic_id,
            _ms(p.get("lock_duration_s"), 60_000),
            mdc,
            _ms(p.get("default_ttl_s"), int(MAX_TTL_S * 1000)),
            _bool(p.get("dead_lettering_on_expiration", False)),
            _bool(p.get("dead_lettering_on_filter_exceptions", True)),
            _bool(p.get("requires_session", False)),
            _bool(p.get("requires_duplicate_detection", False)),
            _ms(p.get("duplicate_window_s"), 600_000),
            p.get("forward_to") or None,
            p.get("forward_dead_lettered_to") or None,
            status,
            p.get("max_size"),
        )
        cols = (
            "kind, topic_id, lock_duration_ms, max_delivery_count, default_ttl_ms, dl_on_expiration, "
            "dl_on_filter_exc, requires_session, requires_dup, dup_window_ms, forward_to, forward_dlq_to, "
            "status, max_size"
        )
        with self.store.write() as db:
            existing = db.execute("SELECT kind FROM entity WHERE path = ?", (path,)).fetchone()
            if existing:
                if not exist_ok:
                    raise InvalidOperation(f"The messaging entity '{path}' already exists.")
                if existing[0] != kind:
                    raise BadInput(f"{path!r} already exists as a {existing[0]}, not a {kind}")
                sets = ", ".join(f"{c.strip()} = ?" for c in cols.split(","))
                db.execute(f"UPDATE entity SET {sets} WHERE path = ?", (*row, path))
            else:
                db.execute(f"INSERT INTO entity (path, {cols}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", (path, *row))
            return self._info(db, self._entity_by_path(db, path))

    def delete_entity(self, entity: EntityPath | str) -> None:
        """Delete an entity with its messages (a topic with its subscriptions)."""
        path = str(entity)
        with self.store.write() as db:
            ent = self._entity_by_path(db, path)
            ids = [ent.id]
            if ent.kind == "topic":
                ids += [r[0] for r in db.execute("SELECT id FROM entity WHERE topic_id = ?", (ent.id,))]
            for i in ids:
                db.execute("DELETE FROM message WHERE entity_id = ?", (i,))
                db.execute("DELETE FROM rule WHERE entity_id = ?", (i,))
                db.execute("DELETE FROM dedup WHERE entity_id = ?", (i,))
                db.execute("DELETE FROM entity WHERE id = ?", (i,))

    def set_status(self, entity: EntityPath | str, status: str) -> None:
        """Enable or disable an entity (`Active` | `Disabled`)."""
        if status not in ("Active", "Disabled"):
            raise BadInput(f"invalid status {status!r}: Active or Disabled")
        with self.store.write() as db:
            ent = self._entity_by_path(db, str(entity))
            db.execute("UPDATE entity SET status = ? WHERE id = ?", (status, ent.id))

    def reset(self) -> None:
        """Delete every entity and message."""
        with self.store.write() as db:
            for table in ("message", "rule", "dedup", "entity"):
                db.execute(f"DELETE FROM {table}")

    def list_entities(self) -> list[EntityInfo]:
        """Every queue, topic and subscription, topics followed by their subscriptions."""
        with self.store.read() as db:
            ents = [self._row_entity(r) for r in db.execute(f"SELECT {_ENTITY_COLS} FROM entity ORDER BY path")]
            return [self._info(db, e) for e in ents]

    def get_entity(self, entity: EntityPath | str) -> EntityInfo:
        """One entity; EntityNotFound when missing."""
        with self.store.read() as db:
            return self._info(db, self._entity_by_path(db, str(entity)))

    def rules(self, entity: EntityPath | str) -> list[Rule]:
        """A subscription's rules."""
        with self.store.read() as db:
            ent = self._entity_by_path(db, str(entity))
            out = []
            for name, ftype, text, action in db.execute(
                "SELECT name, filter_type, filter, action FROM rule WHERE entity_id = ? ORDER BY id", (ent.id,)
            ):
                if ftype == "correlation":
                    out.append(Rule(name=name, correlation=json.loads(text), action=action))
                else:
                    out.append(Rule(name=name, sql=text, action=action))
            return out

    def counts(self, entity: EntityPath | str) -> Counts:
        """Message counts of a queue or subscription.

        Expired messages count until a receiver removes them (the service expires lazily);
        deferred messages count as active, as the service counts them. What the broker does
        on its own timers (scheduled messages falling due, locks lapsing) is settled first.
        """
        now = self._now()
        with self.store.read() as db:
            ent = self._entity_by_path(db, str(entity))
            if ent.kind == "topic":
                raise BadInput(f"{ent.path!r} is a topic: counts are per subscription")
        self._upkeep(ent, now)
        with self.store.read() as db:
            c = Counts(entity=ent.path)
            for queue, sched, n in db.execute(
                "SELECT queue, state = 2 AND scheduled_ms > ?, COUNT(*) FROM message WHERE entity_id = ? GROUP BY 1, 2",
                (now, ent.id),
            ):
                if queue == 1:
                    c.dead_letter += n
                elif queue == 2:
                    c.transfer_dead_letter += n
                elif sched:
                    c.scheduled += n
                else:
                    c.active += n
            return c

    # ------------------------------------------------------------------ sending

    def send(self, entity: EntityPath | str, messages: Sequence[OutboundMessage]) -> list[int]:
        """Send to a queue or topic; returns the sequence numbers assigned.

        Messages dropped by duplicate detection get no sequence number, so the list can be
        shorter than the batch.
        """
        now = self._now()
        with self.store.write() as db:
            ent = self._entity_by_path(db, str(entity))
            if ent.kind == "subscription":
                raise InvalidOperation(f"Cannot send to subscription '{ent.path}': send to its topic.")
            if ent.status != "Active":
                raise EntityDisabled(f"Messaging entity '{ent.path}' is currently disabled.")
            if not messages:
                return []
            if ent.kind == "queue":
                if ent.requires_session and any(m.session_id is None for m in messages):
                    raise InvalidOperation(
                        "The SessionId was not set on a message, and it cannot be sent to the entity. "
                        "Entities that have session support enabled can only receive messages that have "
                        "the SessionId set to a valid value."
                    )
                if ent.max_size is not None and self._size(db, ent) + len(messages) > ent.max_size:
                    raise QuotaExceeded(f"The messaging entity '{ent.path}' is full ({ent.max_size} messages).")
                if not ent.requires_dup and not ent.forward_to:
                    return self._send_plain(db, ent, messages, now)
            return self._deliver(db, ent, _drafts(messages), now)

    def _send_plain(
        self, db: sqlite3.Connection, ent: _Entity, messages: Sequence[OutboundMessage], now: int
    ) -> list[int]:
        """The common case, a queue with no forwarding or duplicate detection: rows straight
        from the outbound messages, without the per-message drafts of the general path.

        Messages with nothing but an id, a body and application properties (bulk sends) take
        a statement binding 9 values instead of 23: binding is much of SQLite's cost here.
        """
        n = len(messages)
        first = self._reserve(db, ent, n)
        ceiling = ent.default_ttl_ms
        never = min(now + ceiling, MAX_TIME_MS)
        eid = ent.id
        fresh_ids = _message_ids(sum(1 for m in messages if m.message_id is None))
        slim: list[tuple[Any, ...]] = []
        full: list[tuple[Any, ...]] = []
        shaped: dict[tuple[bool, ...], list[tuple[Any, ...]]] = {}
        oversized: list[tuple[int, OutboundMessage, str]] = []
        seq = first - 1
        for m in messages:
            seq += 1
            message_id = m.message_id
            if message_id is None:
                message_id = next(fresh_ids)
            sid, cid, subj, ctype, rto, rtsid, to, pkey = (
                m.session_id, m.correlation_id, m.subject, m.content_type, m.reply_to, m.reply_to_session_id,
                m.to, m.partition_key,
            )  # fmt: skip
            plain = (
                sid is None and cid is None and subj is None and ctype is None and rto is None
                and rtsid is None and to is None and pkey is None
            )  # fmt: skip
            if plain:
                fields = len(message_id)
            else:
                fields = (
                    len(message_id) + len(sid or "") + len(cid or "") + len(subj or "") + len(ctype or "")
                    + len(rto or "") + len(rtsid or "") + len(to or "") + len(pkey or "")
                )  # fmt: skip
            props = m.application_properties
            props_text: str | None = None
            if props:
                text = props_text = encode_props(props)
                # The JSON text bounds the header estimate (each non-text value is counted as
                # 8 bytes, at most 3 more than its JSON): the exact sum only near the limit.
                if fields + len(text) + 3 * len(props) > HEADER_LIMIT and (
                    _outbound_header_size(m, message_id) > HEADER_LIMIT
                ):
                    oversized.append((seq, m, message_id))
                    continue
            elif fields > HEADER_LIMIT:
                oversized.append((seq, m, message_id))
                continue
            body = m.body if type(m.body) is bytes else bytes(m.body)
            ttl_s = m.time_to_live_s
            sched = m.scheduled_enqueue_time
            if ttl_s is None and sched is None:
                if plain:
                    slim.append((eid, seq, message_id, ceiling, now, never, props_text, body, m.body_type))
                    continue
                # Bind only the optional fields this message has: most are None, and binding
                # is much of SQLite's cost. Messages of one shape share one statement.
                optional = (sid, cid, subj, ctype, rto, rtsid, to, pkey)
                shape = tuple(v is not None for v in optional)
                shaped.setdefault(shape, []).append(
                    (eid, seq, message_id, *(v for v in optional if v is not None), ceiling, now, never,
                     props_text, body, m.body_type)
                )  # fmt: skip
                continue
            else:
                ttl = ceiling if ttl_s is None else min(_ttl_ms(ttl_s), ceiling)
                sched_ms = None if sched is None else to_epoch_ms(sched)
                if sched_ms is not None and sched_ms > now:
                    state, enqueued = 2, sched_ms
                else:
                    state, enqueued, sched_ms = 0, now, None
                expires = min(enqueued + ttl, MAX_TIME_MS)
            full.append(
                (eid, 0, seq, state, message_id, sid, cid, subj, ctype, rto, rtsid, to, pkey, ttl, enqueued,
                 expires, sched_ms, 0, None, 0, props_text, body, m.body_type)
            )  # fmt: skip
        if slim:
            db.executemany(_INSERT_SLIM, slim)
        for shape, rows in shaped.items():
            db.executemany(_insert_shaped(shape), rows)
        if full:
            db.executemany(_INSERT, full)
        if oversized:
            drafts = []
            for s, m, message_id in oversized:
                d = _Draft.of(m, message_id)
                d.seq = s
                drafts.append(d)
            self._dead_letter_drafts(db, ent, drafts, HEADER_REASON, HEADER_DESCRIPTION, now)
        return list(range(first, first + n))

    def cancel_scheduled(self, entity: EntityPath | str, sequence_numbers: Sequence[int]) -> None:
        """Cancel scheduled messages by sequence number (numbers of other messages are ignored)."""
        with self.store.write() as db:
            ent = self._entity_by_path(db, str(entity))
            for chunk in _chunks(list(sequence_numbers)):
                marks = ",".join("?" * len(chunk))
                db.execute(
                    f"DELETE FROM message WHERE entity_id = ? AND queue = 0 AND state = 2 AND seq IN ({marks})",
                    (ent.id, *chunk),
                )

    def _deliver(self, db: sqlite3.Connection, ent: _Entity, drafts: list[_Draft], now: int) -> list[int]:
        """Route drafts into an entity: topics fan out, forwarding follows, rules apply."""
        if not drafts:
            return []
        if ent.kind == "topic":
            return self._fan_out(db, ent, drafts, now)
        if ent.requires_dup:
            drafts = self._dedup(db, ent, drafts, now)
        self._number(db, ent, drafts)
        result = [d.seq for d in drafts if d.seq is not None]
        landing: list[_Draft] = []
        no_session: list[_Draft] = []
        oversized: list[_Draft] = []
        session_check = ent.kind == "subscription" and ent.requires_session
        for d in drafts:
            if session_check and d.session_id is None:
                no_session.append(d)
            elif d.header_size() > HEADER_LIMIT:
                oversized.append(d)
            else:
                landing.append(d)
        if ent.forward_to and landing:
            # Scheduled messages wait here and are forwarded when they fall due.
            immediate = [d for d in landing if d.scheduled_ms is None or d.scheduled_ms <= now]
            landing = [d for d in landing if not (d.scheduled_ms is None or d.scheduled_ms <= now)]
            self._forward(db, ent, ent.forward_to, immediate, now)
        self._insert(db, ent, 0, landing, now)
        self._dead_letter_drafts(db, ent, no_session, SESSION_REASON, SESSION_DESCRIPTION, now)
        self._dead_letter_drafts(db, ent, oversized, HEADER_REASON, HEADER_DESCRIPTION, now)
        return result

    def _fan_out(
        self, db: sqlite3.Connection, topic: _Entity, drafts: list[_Draft], now: int, *, fresh: bool = True
    ) -> list[int]:
        """Copy topic messages into every subscription whose rules take them."""
        if topic.requires_dup and fresh:
            drafts = self._dedup(db, topic, drafts, now)
        self._number(db, topic, drafts)
        result = [d.seq for d in drafts if d.seq is not None]
        due = [d for d in drafts if d.scheduled_ms is None or d.scheduled_ms <= now]
        if len(due) < len(drafts):
            # Scheduled topic messages wait in the topic and fan out when they fall due.
            later = [d for d in drafts if not (d.scheduled_ms is None or d.scheduled_ms <= now)]
            self._insert(db, topic, 0, later, now)
        if not due:
            return result
        subs = [
            self._row_entity(r)
            for r in db.execute(f"SELECT {_ENTITY_COLS} FROM entity WHERE topic_id = ? ORDER BY id", (topic.id,))
        ]
        for sub in subs:
            if sub.status != "Active":
                continue
            accepted: list[_Draft] = []
            failed: dict[tuple[str, str], list[_Draft]] = {}
            rules = self._compiled_rules(db, sub)
            for d in due:
                try:
                    copy = self._apply_rules(rules, d)
                except _RuleError as err:
                    if sub.dl_on_filter_exc:
                        failed.setdefault((err.type_name, err.message), []).append(d.copy())
                    continue
                if copy is not None:
                    # The smaller of the topic's and the subscription's TTL applies.
                    ceiling = topic.default_ttl_ms
                    copy.ttl_ms = ceiling if copy.ttl_ms is None else min(copy.ttl_ms, ceiling)
                    accepted.append(copy)
            self._deliver(db, sub, accepted, now)
            for (reason, description), failures in failed.items():
                self._dead_letter_drafts(db, sub, failures, reason, description, now)
        return result

    def _compiled_rules(self, db: sqlite3.Connection, sub: _Entity) -> list[tuple[str, Any, Any]]:
        """A subscription's rules as (name, filter, action): filter is a bool, _Correlation or SqlFilter."""
        out = []
        for name, ftype, text, action in db.execute(
            "SELECT name, filter_type, filter, action FROM rule WHERE entity_id = ? ORDER BY id", (sub.id,)
        ):
            key = (ftype, text)
            if key not in self._compiled:
                if ftype == "correlation":
                    self._compiled[key] = _compile_correlation(json.loads(text))
                else:
                    constant = _constant_filter(text)
                    if constant is None:
                        from sbdlq.sqlfilter import compile_filter

                        self._compiled[key] = compile_filter(text)
                    else:
                        self._compiled[key] = constant
            act = None
            if action:
                akey = ("action", action)
                if akey not in self._compiled:
                    from sbdlq.sqlfilter import compile_action

                    self._compiled[akey] = compile_action(action)
                act = self._compiled[akey]
            out.append((name, self._compiled[key], act))
        return out

    @staticmethod
    def _apply_rules(rules: list[tuple[str, Any, Any]], d: _Draft) -> _Draft | None:
        """The copy a subscription receives, or None when no rule matches.

        Rules are OR-ed into one copy; the actions of every matching rule apply to it in order.
        """
        copy: _Draft | None = None
        system: dict[str, Any] | None = None
        for _name, flt, act in rules:
            if flt is True:
                matched = True
            elif flt is False:
                matched = False
            else:
                if system is None:
                    system = d.system()
                try:
                    matched = flt.matches(system, d.props)
                except Exception as exc:
                    raise _rule_error(exc) from None
            if not matched:
                continue
            if copy is None:
                copy = d.copy()
            if act is not None:
                sys_now = copy.system()
                try:
                    act.apply(sys_now, copy.props)
                except Exception as exc:
                    raise _rule_error(exc) from None
                copy.take_system(sys_now)
        return copy

    def _forward(self, db: sqlite3.Connection, src: _Entity, dest_path: str, drafts: list[_Draft], now: int) -> None:
        """Auto-forward; too many hops, or a destination that can't take it: src's transfer DLQ."""
        if not drafts:
            return
        too_far = [d for d in drafts if d.hops + 1 > MAX_HOPS]
        going = [d for d in drafts if d.hops + 1 <= MAX_HOPS]
        self._transfer_dead_letter(db, src, too_far, HOPS_REASON, HOPS_DESCRIPTION, now)
        if not going:
            return
        row = db.execute(f"SELECT {_ENTITY_COLS} FROM entity WHERE path = ?", (dest_path,)).fetchone()
        if row is None:
            description = f"The messaging entity '{dest_path}' could not be found."
            self._transfer_dead_letter(db, src, going, "MessagingEntityNotFound", description, now)
            return
        dest = self._row_entity(row)
        if dest.status != "Active":
            description = f"Messaging entity '{dest.path}' is currently disabled."
            self._transfer_dead_letter(db, src, going, "MessagingEntityDisabled", description, now)
            return
        if dest.kind == "queue" and dest.max_size is not None:
            # As many as fit go; the rest stop here.
            room = max(0, dest.max_size - self._size(db, dest))
            full = going[room:]
            going = going[:room]
            description = f"The messaging entity '{dest.path}' is full ({dest.max_size} messages)."
            self._transfer_dead_letter(db, src, full, "QuotaExceeded", description, now)
        moved = [d.copy(hops=d.hops + 1, seq=None) for d in going]
        self._deliver(db, dest, moved, now)

    def _transfer_dead_letter(
        self, db: sqlite3.Connection, src: _Entity, drafts: list[_Draft], reason: str, description: str | None, now: int
    ) -> None:
        if drafts:
            self._insert(db, src, 2, drafts, now, extra=_dead_letter_props(reason, description))

    def _dead_letter_drafts(
        self,
        db: sqlite3.Connection,
        ent: _Entity,
        drafts: list[_Draft],
        reason: str | None,
        description: str | None,
        now: int,
    ) -> None:
        """Dead-letter messages that never landed (or were just taken out of the main queue)."""
        if not drafts:
            return
        extra = _dead_letter_props(reason, description)
        if ent.forward_dlq_to:
            moved = []
            for d in drafts:
                c = d.copy(dl_source=ent.path, scheduled_ms=None, enqueued_ms=None)
                c.props.update(extra)
                moved.append(c)
            self._forward(db, ent, ent.forward_dlq_to, moved, now)
            return
        self._insert(db, ent, 1, drafts, now, extra=extra)

    def _insert(
        self,
        db: sqlite3.Connection,
        ent: _Entity,
        queue: int,
        drafts: Sequence[_Draft],
        now: int,
        *,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Store drafts in one of the entity's queues, numbering those that have no number yet."""
        if not drafts:
            return
        self._number(db, ent, drafts)
        rows = []
        ceiling = ent.default_ttl_ms
        for d in drafts:
            props = {**d.props, **extra} if extra else d.props
            scheduled = queue == 0 and d.scheduled_ms is not None and d.scheduled_ms > now
            if scheduled and d.scheduled_ms is not None:
                enqueued = d.scheduled_ms
            else:
                enqueued = d.enqueued_ms if d.enqueued_ms is not None else now
            ttl = min(d.ttl_ms, ceiling) if d.ttl_ms is not None else ceiling
            rows.append(
                (ent.id, queue, d.seq, 2 if scheduled else 0, d.message_id, d.session_id, d.correlation_id,
                 d.subject, d.content_type, d.reply_to, d.reply_to_session_id, d.to, d.partition_key, ttl,
                 enqueued, min(enqueued + ttl, MAX_TIME_MS), d.scheduled_ms if scheduled else None, 0,
                 d.dl_source, d.hops, dump_props(props), d.body, d.body_type)
            )  # fmt: skip
        db.executemany(_INSERT, rows)

    def _number(self, db: sqlite3.Connection, ent: _Entity, drafts: Sequence[_Draft]) -> None:
        """Give drafts without a sequence number the entity's next ones."""
        unnumbered = [d for d in drafts if d.seq is None]
        if unnumbered:
            seq = self._reserve(db, ent, len(unnumbered))
            for d in unnumbered:
                d.seq = seq
                seq += 1

    def _reserve(self, db: sqlite3.Connection, ent: _Entity, n: int) -> int:
        """Take a block of n sequence numbers from the entity's counter; returns the first."""
        (end,) = db.execute(
            "UPDATE entity SET next_seq = next_seq + ? WHERE id = ? RETURNING next_seq", (n, ent.id)
        ).fetchone()
        return int(end) - n

    def _dedup(self, db: sqlite3.Connection, ent: _Entity, drafts: list[_Draft], now: int) -> list[_Draft]:
        """Drop messages whose id was seen within the duplicate-detection window."""
        horizon = now - ent.dup_window_ms
        if self._dedup_pruned.get(ent.id, 0) < horizon:
            # History older than the window means nothing: drop it about once a window.
            db.execute("DELETE FROM dedup WHERE entity_id = ? AND seen_ms <= ?", (ent.id, horizon))
            self._dedup_pruned[ent.id] = now
        wanted = list({d.message_id for d in drafts if d.message_id is not None})
        seen: set[str] = set()
        for chunk in _chunks(wanted):
            marks = ",".join("?" * len(chunk))
            seen.update(
                r[0]
                for r in db.execute(
                    f"SELECT message_id FROM dedup WHERE entity_id = ? AND message_id IN ({marks}) AND seen_ms > ?",
                    (ent.id, *chunk, horizon),
                )
            )
        kept = []
        marks_new = []
        for d in drafts:
            if d.message_id is not None:
                if d.message_id in seen:
                    continue
                seen.add(d.message_id)
                marks_new.append((ent.id, d.message_id, now))
            kept.append(d)
        db.executemany("INSERT OR REPLACE INTO dedup VALUES (?,?,?)", marks_new)
        return kept

    def _size(self, db: sqlite3.Connection, ent: _Entity) -> int:
        return int(
            db.execute("SELECT COUNT(*) FROM message WHERE entity_id = ? AND queue = 0", (ent.id,)).fetchone()[0]
        )

    # ------------------------------------------------------------------ receiving

    def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        """Browse without locking: every state, expired messages included."""
        now = self._now()
        with self.store.read() as db:
            ent = self._queue_entity(db, address)
        # Paging through a DLQ asks again and again: the broker's timers are settled on the
        # first page and then at most once a second, not on every page.
        if from_sequence <= 0 or now - self._upkeep_at.get(ent.id, -_UPKEEP_EVERY_MS) >= _UPKEEP_EVERY_MS:
            self._upkeep(ent, now)
            self._upkeep_at[ent.id] = now
        with self.store.read() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM message WHERE entity_id = ? AND queue = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (ent.id, _QUEUE[address.sub_queue], max(from_sequence, 0), max(max_count, 0)),
            ).fetchall()
            return [self._message(r, with_lock=False) for r in rows]

    def receive(
        self,
        address: Address,
        max_count: int,
        *,
        mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
        session_id: str | None = None,
    ) -> list[Message]:
        """Take up to max_count available messages, locked or deleted; never an expired one.

        A receiver on the main queue is what expires messages (lazily, as the service does):
        expired ones met on the way are dropped or dead-lettered.
        """
        if max_count <= 0:
            return []
        now = self._now()
        queue = _QUEUE[address.sub_queue]
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            self._materialize_due(db, now)
            self._settle_lapsed(db, ent, now)
            out: list[Message] = []
            expired: list[int] = []
            after = -1
            page = max_count
            while len(out) < max_count:
                want = max_count - len(out)
                sql = (
                    f"SELECT {_COLUMNS} FROM message WHERE entity_id = ? AND queue = ? AND state = 0 AND seq > ? "
                    "AND (locked_until_ms IS NULL OR locked_until_ms <= ?)"
                )
                args: list[Any] = [ent.id, queue, after, now]
                if session_id is not None:
                    sql += " AND session_id = ?"
                    args.append(session_id)
                rows = db.execute(sql + " ORDER BY seq LIMIT ?", (*args, max(page, want))).fetchall()
                if not rows:
                    break
                take = []
                skipped = 0
                for r in rows:
                    after = r[1]
                    if queue == 0 and r[14] <= now:
                        expired.append(r[0])
                        skipped += 1
                        continue
                    take.append(r)
                    if len(take) == want:
                        break
                if skipped:
                    # A run of expired messages: read further ahead next time round.
                    page = min(max(page * 2, 64), 4096)
                if mode is ReceiveMode.RECEIVE_AND_DELETE:
                    for chunk in _chunks([r[0] for r in take]):
                        db.execute(f"DELETE FROM message WHERE id IN ({','.join('?' * len(chunk))})", chunk)
                    out.extend(self._message(r, with_lock=False, delivered=True) for r in take)
                elif take:
                    until = now + ent.lock_duration_ms
                    locked_until = _time(until)
                    updates = []
                    tokens = _lock_tokens(len(take))
                    for r in take:
                        token = next(tokens)
                        updates.append((token, until, r[0]))
                        m = self._message(r, with_lock=False, delivered=True)
                        m.lock_token = token
                        m.locked_until = locked_until
                        out.append(m)
                    db.executemany(
                        "UPDATE message SET lock_token = ?, locked_until_ms = ?, delivery_count = delivery_count + 1 "
                        "WHERE id = ?",
                        updates,
                    )
            self._expire_rows(db, ent, expired, now)
            return out

    def discard(self, address: Address, max_count: int) -> int:
        """Receive-and-delete without handing anything back: how many were deleted.

        Dead-letter queues are deleted in one statement; the main queue goes through receive,
        whose rules (expiry, lapsed locks) decide what a receiver may take.
        """
        if max_count <= 0:
            return 0
        if address.sub_queue is SubQueue.NONE:
            return len(self.receive(address, max_count, mode=ReceiveMode.RECEIVE_AND_DELETE))
        now = self._now()
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            cur = db.execute(
                "DELETE FROM message WHERE id IN (SELECT id FROM message WHERE entity_id = ? AND queue = ? "
                "AND state = 0 AND (locked_until_ms IS NULL OR locked_until_ms <= ?) ORDER BY seq LIMIT ?)",
                (ent.id, _QUEUE[address.sub_queue], now, max_count),
            )
            return max(cur.rowcount, 0)

    def receive_deferred(
        self, address: Address, sequence_numbers: Sequence[int], *, mode: ReceiveMode = ReceiveMode.PEEK_LOCK
    ) -> list[Message]:
        """Receive deferred messages by sequence number; MessageNotFound when one isn't deferred here."""
        now = self._now()
        queue = _QUEUE[address.sub_queue]
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            self._settle_lapsed(db, ent, now)
            out = []
            for seq in sequence_numbers:
                r = db.execute(
                    f"SELECT {_COLUMNS} FROM message WHERE entity_id = ? AND queue = ? AND seq = ? AND state = 1",
                    (ent.id, queue, seq),
                ).fetchone()
                if r is None:
                    raise MessageNotFound(f"Failed to lock one or more specified messages: {seq} is not deferred.")
                if r[18] is not None and r[18] > now:
                    raise MessageNotFound(f"The deferred message {seq} is locked by another receiver.")
                m = self._message(r, with_lock=False, delivered=True)
                if mode is ReceiveMode.RECEIVE_AND_DELETE:
                    db.execute("DELETE FROM message WHERE id = ?", (r[0],))
                else:
                    token = next(_lock_tokens(1))
                    until = now + ent.lock_duration_ms
                    db.execute(
                        "UPDATE message SET lock_token = ?, locked_until_ms = ?, delivery_count = delivery_count + 1 "
                        "WHERE id = ?",
                        (token, until, r[0]),
                    )
                    m.lock_token, m.locked_until = token, from_epoch_ms(until)
                out.append(m)
            return out

    # ------------------------------------------------------------------ settlement

    def complete(self, address: Address, lock_tokens: Sequence[str]) -> list[str]:
        """Remove locked messages; returns the tokens whose lock was lost."""
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            held, lost = self._held(db, ent, address, lock_tokens, self._now(), columns="id")
            for chunk in _chunks([r[0] for r in held]):
                db.execute(f"DELETE FROM message WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            return lost

    def abandon(
        self, address: Address, lock_tokens: Sequence[str], properties: dict[str, Any] | None = None
    ) -> list[str]:
        """Release locks: the message is available again, or dead-lettered past MaxDeliveryCount,
        or (past its expiry) expired."""
        now = self._now()
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            held, lost = self._held(db, ent, address, lock_tokens, now, columns=_RELEASE_COLS)
            if properties:
                self._modify(db, [r[0] for r in held], properties)
            self._release(db, ent, held, now)
            return lost

    def release(self, address: Address, lock_tokens: Sequence[str]) -> list[str]:
        """Give back messages delivered but never handed to the application (AMQP `released`).

        Unlike abandon, this was not a delivery attempt: the lock goes and the delivery count
        taken when it was locked is returned, so it can never push a message into the DLQ.
        """
        now = self._now()
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            held, lost = self._held(db, ent, address, lock_tokens, now, columns="id")
            for chunk in _chunks([r[0] for r in held]):
                db.execute(
                    "UPDATE message SET lock_token = NULL, locked_until_ms = NULL, "
                    "delivery_count = MAX(delivery_count - 1, 0) "
                    f"WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            return lost

    def dead_letter(
        self,
        address: Address,
        lock_tokens: Sequence[str],
        reason: str | None = None,
        description: str | None = None,
        properties: dict[str, Any] | None = None,
    ) -> list[str]:
        """Move locked messages to the DLQ with the application's reason and description."""
        if address.sub_queue is not SubQueue.NONE:
            raise InvalidOperation("Cannot dead-letter a message that is already in a dead-letter queue.")
        now = self._now()
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            held, lost = self._held(db, ent, address, lock_tokens, now, columns="id")
            ids = [r[0] for r in held]
            if properties:
                self._modify(db, ids, properties)
            self._dead_letter_rows(db, ent, ids, reason, description, now)
            return lost

    def defer(
        self, address: Address, lock_tokens: Sequence[str], properties: dict[str, Any] | None = None
    ) -> list[str]:
        """Set messages aside: only receive_deferred by sequence number returns them."""
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            held, lost = self._held(db, ent, address, lock_tokens, self._now(), columns="id")
            ids = [r[0] for r in held]
            if properties:
                self._modify(db, ids, properties)
            for chunk in _chunks(ids):
                db.execute(
                    "UPDATE message SET state = 1, lock_token = NULL, locked_until_ms = NULL "
                    f"WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            return lost

    def renew_locks(self, address: Address, lock_tokens: Sequence[str]) -> dict[str, datetime]:
        """Extend locks by the lock duration; lost tokens are absent from the result."""
        now = self._now()
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            held, _lost = self._held(db, ent, address, lock_tokens, now, columns="id, lock_token")
            until = now + ent.lock_duration_ms
            for chunk in _chunks([r[0] for r in held]):
                db.execute(
                    f"UPDATE message SET locked_until_ms = ? WHERE id IN ({','.join('?' * len(chunk))})",
                    (until, *chunk),
                )
            stamp = from_epoch_ms(until)
            assert stamp is not None
            return {r[1]: stamp for r in held}

    # ------------------------------------------------------------------ internals

    def _held(
        self,
        db: sqlite3.Connection,
        ent: _Entity,
        address: Address,
        tokens: Sequence[str],
        now: int,
        *,
        columns: str,
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Rows (the named columns) whose lock the caller still holds, and the tokens it has lost."""
        queue = _QUEUE[address.sub_queue]
        found: dict[str, tuple[Any, ...]] = {}
        unique = list(dict.fromkeys(tokens))
        for chunk in _chunks(unique):
            for r in db.execute(
                f"SELECT lock_token, {columns} FROM message WHERE lock_token IN ({','.join('?' * len(chunk))}) "
                "AND entity_id = ? AND queue = ? AND locked_until_ms > ?",
                (*chunk, ent.id, queue, now),
            ):
                found[r[0]] = r[1:]
        held = [found[t] for t in unique if t in found]
        lost = [t for t in tokens if t not in found]
        return held, lost

    def _release(self, db: sqlite3.Connection, ent: _Entity, rows: Sequence[tuple[Any, ...]], now: int) -> None:
        """Locks ending without settlement (abandon, lapse), rows as _RELEASE_COLS.

        Main queue: past MaxDeliveryCount → DLQ; expired (and not deferred) → expiry; else
        available again. The DLQs have neither rule: their messages just become available.
        """
        over: list[int] = []
        expired: list[int] = []
        rest: list[int] = []
        mdc = ent.max_delivery_count
        for i, queue, state, delivered, expires in rows:
            if queue != 0:
                rest.append(i)
            elif delivered >= mdc:
                over.append(i)
            elif state == 0 and expires <= now:
                expired.append(i)
            else:
                rest.append(i)
        self._unlock(db, rest)
        self._dead_letter_rows(db, ent, over, MAX_DELIVERY_REASON, _mdc_text(ent), now)
        self._expire_rows(db, ent, expired, now)

    def _settle_lapsed(self, db: sqlite3.Connection, ent: _Entity, now: int) -> None:
        """Locks that lapsed since the last look: the broker's lock timer, run lazily."""
        rows = db.execute(
            f"SELECT {_RELEASE_COLS} FROM message WHERE entity_id = ? AND locked_until_ms IS NOT NULL "
            "AND locked_until_ms <= ?",
            (ent.id, now),
        ).fetchall()
        if rows:
            self._release(db, ent, rows, now)

    def _upkeep(self, ent: _Entity, now: int) -> None:
        """Before a read: settle due scheduled messages and lapsed locks, if there are any.

        Two cheap indexed probes; the write transaction is only taken when there's work.
        """
        with self.store.read() as db:
            due = self._due_exists(db, now)
            lapsed = (
                db.execute(
                    "SELECT 1 FROM message WHERE entity_id = ? AND locked_until_ms IS NOT NULL "
                    "AND locked_until_ms <= ? LIMIT 1",
                    (ent.id, now),
                ).fetchone()
                is not None
            )
        if not (due or lapsed):
            return
        with self.store.write() as db:
            self._materialize_due(db, now)
            row = db.execute(f"SELECT {_ENTITY_COLS} FROM entity WHERE id = ?", (ent.id,)).fetchone()
            if row is not None:
                self._settle_lapsed(db, self._row_entity(row), now)

    def _unlock(self, db: sqlite3.Connection, ids: list[int]) -> None:
        for chunk in _chunks(ids):
            db.execute(
                "UPDATE message SET lock_token = NULL, locked_until_ms = NULL "
                f"WHERE id IN ({','.join('?' * len(chunk))})",
                chunk,
            )

    def _modify(self, db: sqlite3.Connection, ids: list[int], properties: dict[str, Any]) -> None:
        """Merge properties into the rows' application properties (one read and one write per chunk)."""
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            updates = []
            for i, text in db.execute(f"SELECT id, props FROM message WHERE id IN ({marks})", chunk):
                props = load_props(text)
                props.update(properties)
                updates.append((dump_props(props), i))
            db.executemany("UPDATE message SET props = ? WHERE id = ?", updates)

    def _dead_letter_rows(
        self,
        db: sqlite3.Connection,
        ent: _Entity,
        ids: list[int],
        reason: str | None,
        description: str | None,
        now: int,
    ) -> None:
        """Move main-queue rows to the DLQ (or forward them per ForwardDeadLetteredMessagesTo)."""
        if not ids:
            return
        extra = _dead_letter_props(reason, description)
        if ent.forward_dlq_to:
            drafts = []
            for chunk in _chunks(ids):
                marks = ",".join("?" * len(chunk))
                for r in db.execute(f"SELECT {_COLUMNS} FROM message WHERE id IN ({marks}) ORDER BY seq", chunk):
                    d = _row_draft(r)
                    d.props.update(extra)
                    d.dl_source = ent.path
                    d.scheduled_ms = None
                    drafts.append(d)
                db.execute(f"DELETE FROM message WHERE id IN ({marks})", chunk)
            self._forward(db, ent, ent.forward_dlq_to, drafts, now)
            return
        # The reason and description are set inside SQLite (json_set), so moving thousands of
        # rows is one statement per chunk rather than a decode and encode per row.
        if extra:
            paths = ", ".join("?, ?" for _ in extra)
            props_sql = f"json_set(COALESCE(props, '{{}}'), {paths})"
            props_args: list[Any] = []
            for k, v in extra.items():
                props_args += [f'$."{k}"', v]
        else:
            props_sql, props_args = "props", []
        for chunk in _chunks(ids):
            db.execute(
                f"UPDATE message SET queue = 1, state = 0, lock_token = NULL, locked_until_ms = NULL, "
                f"props = {props_sql} WHERE id IN ({','.join('?' * len(chunk))})",
                (*props_args, *chunk),
            )

    def _expire_rows(self, db: sqlite3.Connection, ent: _Entity, ids: list[int], now: int) -> None:
        if not ids:
            return
        if ent.dl_on_expiration:
            self._dead_letter_rows(db, ent, ids, TTL_REASON, TTL_DESCRIPTION, now)
            return
        for chunk in _chunks(ids):
            db.execute(f"DELETE FROM message WHERE id IN ({','.join('?' * len(chunk))})", chunk)

    @staticmethod
    def _due_exists(db: sqlite3.Connection, now: int) -> bool:
        row = db.execute("SELECT 1 FROM message WHERE state = 2 AND scheduled_ms <= ? LIMIT 1", (now,)).fetchone()
        return row is not None

    def _materialize_due(self, db: sqlite3.Connection, now: int) -> None:
        """Scheduled messages whose time has come, in every entity: a topic fans them out, a
        forwarding queue forwards them, anywhere else they become active.

        Namespace-wide, because nobody receives from a topic or a forwarding queue: their
        destinations' receivers must see the messages fall due.
        """
        if not self._due_exists(db, now):
            return
        entity_ids = [
            r[0]
            for r in db.execute("SELECT DISTINCT entity_id FROM message WHERE state = 2 AND scheduled_ms <= ?", (now,))
        ]
        for eid in entity_ids:
            row = db.execute(f"SELECT {_ENTITY_COLS} FROM entity WHERE id = ?", (eid,)).fetchone()
            if row is None:
                continue
            ent = self._row_entity(row)
            if ent.kind != "topic" and not ent.forward_to:
                # Enqueued time and expiry were set from the scheduled time when it was sent.
                db.execute(
                    "UPDATE message SET state = 0 WHERE entity_id = ? AND state = 2 AND scheduled_ms <= ?", (eid, now)
                )
                continue
            due = db.execute(
                f"SELECT {_COLUMNS} FROM message WHERE entity_id = ? AND state = 2 AND scheduled_ms <= ? ORDER BY seq",
                (eid, now),
            ).fetchall()
            db.executemany("DELETE FROM message WHERE id = ?", [(r[0],) for r in due])
            drafts = []
            for r in due:
                d = _row_draft(r)
                # It was enqueued at its scheduled time, however late this lazy step runs.
                d.enqueued_ms = d.scheduled_ms
                drafts.append(d)
            if ent.kind == "topic":
                # Scheduled messages keep the sequence numbers they were given when scheduled.
                self._fan_out(db, ent, drafts, now, fresh=False)
            elif ent.forward_to:
                self._forward(db, ent, ent.forward_to, drafts, now)

    def _queue_entity(self, db: sqlite3.Connection, address: Address) -> _Entity:
        ent = self._entity_by_path(db, str(address.entity))
        if ent.kind == "topic":
            raise BadInput(f"{ent.path!r} is a topic: read from one of its subscriptions (TOPIC/Subscriptions/SUB)")
        return ent

    def _entity_by_path(self, db: sqlite3.Connection, path: str) -> _Entity:
        row = db.execute(f"SELECT {_ENTITY_COLS} FROM entity WHERE path = ?", (path,)).fetchone()
        if row is None:
            raise EntityNotFound(f"The messaging entity '{path}' could not be found.")
        return self._row_entity(row)

    @staticmethod
    def _row_entity(r: tuple[Any, ...]) -> _Entity:
        return _Entity(
            id=r[0],
            path=r[1],
            kind=r[2],
            topic_id=r[3],
            lock_duration_ms=r[4],
            max_delivery_count=r[5],
            default_ttl_ms=r[6],
            dl_on_expiration=bool(r[7]),
            dl_on_filter_exc=bool(r[8]),
            requires_session=bool(r[9]),
            requires_dup=bool(r[10]),
            dup_window_ms=r[11],
            forward_to=r[12],
            forward_dlq_to=r[13],
            status=r[14],
            max_size=r[15],
        )

    @staticmethod
    def _info(db: sqlite3.Connection, e: _Entity) -> EntityInfo:
        subs = 0
        if e.kind == "topic":
            subs = db.execute("SELECT COUNT(*) FROM entity WHERE topic_id = ?", (e.id,)).fetchone()[0]
        return EntityInfo(
            path=e.path,
            kind=e.kind,
            requires_session=e.requires_session,
            requires_duplicate_detection=e.requires_dup,
            lock_duration_s=e.lock_duration_ms / 1000,
            max_delivery_count=e.max_delivery_count,
            default_ttl_s=e.default_ttl_ms / 1000,
            dead_lettering_on_expiration=e.dl_on_expiration,
            dead_lettering_on_filter_exceptions=e.dl_on_filter_exc,
            forward_to=e.forward_to,
            forward_dead_lettered_to=e.forward_dlq_to,
            status=e.status,
            subscription_count=subs,
        )

    @staticmethod
    def _message(r: tuple[Any, ...], *, with_lock: bool, delivered: bool = False) -> Message:
        return Message(
            sequence_number=r[1],
            body=r[22] if type(r[22]) is bytes else bytes(r[22]),
            enqueued_time=_time(r[13]),
            message_id=r[3],
            # The broker's DateTime.MaxValue means "never": shown as null, as the SDK does.
            expires_at=_time(r[14]) if r[14] < MAX_TIME_MS else None,
            delivery_count=r[16] + 1 if delivered else r[16],
            subject=r[6],
            correlation_id=r[5],
            content_type=r[7],
            session_id=r[4],
            reply_to=r[8],
            reply_to_session_id=r[9],
            to=r[10],
            partition_key=r[11],
            # A message that never expires has no time to live worth showing.
            time_to_live_s=r[12] / 1000 if r[12] is not None and r[12] < _NEVER_MS else None,
            application_properties=_props(r[21]) if r[21] else {},
            dead_letter_source=r[19],
            scheduled_enqueue_time=_time(r[15]) if r[15] is not None else None,
            state=_STATE_NAMES.get(r[2], "active"),
            lock_token=r[17] if with_lock else None,
            locked_until=_time(r[18]) if with_lock and r[18] is not None else None,
            body_type=r[23],
        )


_ENTITY_COLS = (
    "id, path, kind, topic_id, lock_duration_ms, max_delivery_count, default_ttl_ms, dl_on_expiration, "
    "dl_on_filter_exc, requires_session, requires_dup, dup_window_ms, forward_to, forward_dlq_to, status, max_size"
)


class _RuleError(Exception):
    """A filter or action failed on a message: what the subscription's DLQ records."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message


def _rule_error(exc: Exception) -> _RuleError:
    """The service's view of an evaluation failure: the exception's type name and message."""
    type_name = getattr(exc, "type_name", None) or type(exc).__name__
    message = getattr(exc, "message", None) or str(exc)
    return _RuleError(str(type_name), str(message))


# Correlation filter keys as the service, Microsoft's Config.json and the admin SDK spell
# them, compared without case or underscores; the value names the SQL system property.
_CORRELATION_KEYS = {
    "contenttype": "ContentType",
    "correlationid": "CorrelationId",
    "label": "Label",
    "subject": "Label",
    "messageid": "MessageId",
    "replyto": "ReplyTo",
    "replytosessionid": "ReplyToSessionId",
    "sessionid": "SessionId",
    "to": "To",
}
_CORRELATION_PROPS = {"properties", "applicationproperties", "userproperties"}


@dataclass(frozen=True, slots=True)
class _Correlation:
    """A compiled correlation filter: every named value must equal the message's."""

    system: tuple[tuple[str, Any], ...]
    props: tuple[tuple[str, Any], ...]

    def matches(self, system: dict[str, Any], props: dict[str, Any]) -> bool:
        for name, expected in self.system:
            if system.get(name) != expected:
                return False
        return all(key in props and props[key] == expected for key, expected in self.props)


def _compile_correlation(flt: dict[str, Any]) -> _Correlation:
    """Check and compile a correlation filter; null values are not part of the match."""
    if not isinstance(flt, dict):
        raise BadInput("a correlation filter is an object of property names and values")
    system: list[tuple[str, Any]] = []
    props: list[tuple[str, Any]] = []
    for key, value in flt.items():
        norm = str(key).replace("_", "").lower()
        if norm in _CORRELATION_PROPS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise BadInput(f"correlation filter {key!r} must be an object of application properties")
            props.extend((str(k), v) for k, v in value.items() if v is not None)
        elif norm in _CORRELATION_KEYS:
            if value is not None:
                system.append((_CORRELATION_KEYS[norm], value))
        else:
            known = "ContentType, CorrelationId, Label, MessageId, ReplyTo, ReplyToSessionId, SessionId, To, Properties"
            raise BadInput(f"unknown correlation filter property {key!r}", hint=f"use {known}")
    return _Correlation(tuple(system), tuple(props))


def _constant_filter(sql: str) -> bool | None:
    """True or False for the service's TrueFilter / FalseFilter texts, else None.

    The default rule of every subscription is `1=1`: recognising it spares the SQL
    evaluator on each fan-out (and the emulator the import).
    """
    text = "".join(sql.split()).lower()
    if text in ("1=1", "true"):
        return True
    if text in ("1=0", "false"):
        return False
    return None


def _row_draft(r: tuple[Any, ...]) -> _Draft:
    return _Draft(
        body=bytes(r[22]),
        message_id=r[3],
        session_id=r[4],
        correlation_id=r[5],
        subject=r[6],
        content_type=r[7],
        reply_to=r[8],
        reply_to_session_id=r[9],
        to=r[10],
        partition_key=r[11],
        ttl_ms=r[12],
        scheduled_ms=r[15],
        props=load_props(r[21]),
        body_type=r[23],
        hops=r[20],
        dl_source=r[19],
        seq=r[1],
    )


@functools.lru_cache(maxsize=4096)
def _time(ms: int) -> datetime:
    """An epoch-ms stamp as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000.0, UTC)


@functools.lru_cache(maxsize=1024)
def _props_cached(text: str) -> dict[str, Any]:
    return load_props(text)


def _props(text: str) -> dict[str, Any]:
    """Application properties from their JSON; messages of one batch often share the text.

    The memoised dict is never handed out: each message gets its own (shallow) copy, and
    the values are immutable (str, numbers, bytes, datetime, UUID).
    """
    return dict(_props_cached(text))


def _lock_tokens(n: int) -> Iterator[str]:
    """n lock tokens in UUID form from one call to the OS's random source."""
    blob = os.urandom(16 * n).hex()
    for i in range(0, 32 * n, 32):
        h = blob[i : i + 32]
        yield f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _dead_letter_props(reason: str | None, description: str | None) -> dict[str, Any]:
    """The application properties the broker adds when it dead-letters (None: left out)."""
    extra: dict[str, Any] = {}
    if reason is not None:
        extra[DEAD_LETTER_REASON] = reason
    if description is not None:
        extra[DEAD_LETTER_DESCRIPTION] = description
    return extra


def _ttl_ms(seconds: float) -> int:
    ttl = int(round(min(seconds, MAX_TTL_S) * 1000))
    if ttl <= 0:
        raise BadInput("time to live must be positive")
    return ttl


def _new_message_id() -> str:
    return os.urandom(16).hex()


def _message_ids(n: int) -> Iterator[str]:
    """n fresh message ids from one call to the OS's random source (uuid4 per message costs more)."""
    blob = os.urandom(16 * n).hex()
    return (blob[i : i + 32] for i in range(0, 32 * n, 32))


def _drafts(messages: Sequence[OutboundMessage]) -> list[_Draft]:
    ids = _message_ids(sum(1 for m in messages if m.message_id is None))
    return [_Draft.of(m, None if m.message_id is not None else next(ids)) for m in messages]


def _header_size(fields: Sequence[str | None], props: dict[str, Any]) -> int:
    """Approximate encoded size of the properties and application properties sections."""
    size = 0
    for v in fields:
        if v:
            size += len(v)
    for k, v in props.items():
        size += len(k) + (len(v) if isinstance(v, str | bytes | bytearray) else 8)
    return size


def _outbound_header_size(m: OutboundMessage, message_id: str) -> int:
    return _header_size(
        (
            message_id,
            m.session_id,
            m.correlation_id,
            m.subject,
            m.content_type,
            m.reply_to,
            m.reply_to_session_id,
            m.to,
            m.partition_key,
        ),
        m.application_properties,
    )


def _mdc_text(ent: _Entity) -> str:
    return f"Message could not be consumed after {ent.max_delivery_count} delivery attempts."


def _chunks(items: list[Any], size: int = _CHUNK) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
