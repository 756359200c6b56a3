"""Service Bus semantics (DESIGN §6) over the SQLite store. No CLI, no asyncio.

The rules live here; the backends and the AMQP listener are thin layers above. Every
method is one transaction, so a process killed at any line leaves the store as it was
before or after the call, and several processes may share one store.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
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

from .props import dump_props, load_props
from .store import Store

MAX_HOPS = 4
HEADER_LIMIT = 64 * 1024
# 9999-12-31T23:59:59Z: the broker's DateTime.MaxValue, where "never expires" lands.
MAX_TIME_MS = 253402300799000
_QUEUE = {SubQueue.NONE: 0, SubQueue.DEAD_LETTER: 1, SubQueue.TRANSFER_DEAD_LETTER: 2}
_STATE_NAMES = {0: "active", 1: "deferred", 2: "scheduled"}
_CHUNK = 500  # bound on SQL variables per statement

MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
TTL_REASON = "TTLExpiredException"
TTL_DESCRIPTION = "The message expired and was dead lettered."
SESSION_REASON = "Session id is null."
SESSION_DESCRIPTION = "Session enabled entity doesn't allow a message whose session identifier is null."
HEADER_REASON = "HeaderSizeExceeded"
HEADER_DESCRIPTION = "The size quota for this stream has been exceeded."
HOPS_REASON = "MaxTransferHopCountExceeded"
HOPS_DESCRIPTION = "The message exceeded the maximum number of hops allowed for a transfer."

_COLUMNS = (
    "id, seq, state, message_id, session_id, correlation_id, subject, content_type, reply_to, "
    "reply_to_session_id, to_, partition_key, ttl_ms, enqueued_ms, expires_ms, scheduled_ms, "
    "delivery_count, lock_token, locked_until_ms, dl_source, hops, props, body, body_type"
)
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

    @staticmethod
    def of(m: OutboundMessage) -> _Draft:
        ttl = None if m.time_to_live_s is None else int(round(m.time_to_live_s * 1000))
        if ttl is not None and ttl <= 0:
            raise BadInput("time to live must be positive")
        sched = None if m.scheduled_enqueue_time is None else to_epoch_ms(m.scheduled_enqueue_time)
        return _Draft(
            body=bytes(m.body),
            message_id=m.message_id if m.message_id is not None else uuid.uuid4().hex,
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
        size = sum(
            len(v)
            for v in (
                self.message_id,
                self.session_id,
                self.correlation_id,
                self.subject,
                self.content_type,
                self.reply_to,
                self.reply_to_session_id,
                self.to,
                self.partition_key,
            )
            if v
        )
        for k, v in self.props.items():
            size += len(k) + (len(v) if isinstance(v, (str, bytes)) else 8)
        return size

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
        """Create a subscription with its rules (default: one rule that takes everything)."""
        path = str(EntityPath(topic, name))
        parse_address(path)  # validates both names
        with self.store.write() as db:
            topic_ent = self._entity_by_path(db, topic)
            if topic_ent.kind != "topic":
                raise BadInput(f"{topic!r} is a {topic_ent.kind}, not a topic")
            info = self._create(path, "subscription", topic_ent.id, exist_ok, props)
            ent = self._entity_by_path(db, path)
            compiled = [self._check_rule(r) for r in (rules if rules is not None else [Rule.true()])]
            db.execute("DELETE FROM rule WHERE entity_id = ?", (ent.id,))
            for r in compiled:
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
        from sbdlq.sqlfilter import compile_action, compile_filter

        validate_name(rule.name.lstrip("$") or "x", what="rule")
        if rule.correlation is None:
            compile_filter(rule.sql or "1=1")
        if rule.action:
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
        """Message counts of a queue or subscription (expired messages count until removed)."""
        now = self._now()
        with self.store.read() as db:
            ent = self._entity_by_path(db, str(entity))
            if ent.kind == "topic":
                raise BadInput(f"{ent.path!r} is a topic: counts are per subscription")
            c = Counts(entity=ent.path)
            for queue, state, sched, n in db.execute(
                "SELECT queue, state, state = 2 AND scheduled_ms > ?, COUNT(*) FROM message "
                "WHERE entity_id = ? GROUP BY 1, 2, 3",
                (now, ent.id),
            ):
                if queue == 1:
                    c.dead_letter += n
                elif queue == 2:
                    c.transfer_dead_letter += n
                elif sched:
                    c.scheduled += n
                elif state != 1:
                    c.active += n
            return c

    # ------------------------------------------------------------------ sending

    def send(self, entity: EntityPath | str, messages: Sequence[OutboundMessage]) -> list[int]:
        """Send to a queue or topic; returns the sequence numbers assigned."""
        drafts = [_Draft.of(m) for m in messages]
        now = self._now()
        with self.store.write() as db:
            ent = self._entity_by_path(db, str(entity))
            if ent.kind == "subscription":
                raise InvalidOperation(f"Cannot send to subscription '{ent.path}': send to its topic.")
            if ent.status != "Active":
                raise EntityDisabled(f"Messaging entity '{ent.path}' is currently disabled.")
            if ent.kind == "queue":
                if ent.requires_session and any(d.session_id is None for d in drafts):
                    raise InvalidOperation(
                        "The SessionId was not set on a message, and it cannot be sent to the entity. "
                        "Entities that have session support enabled can only receive messages that have "
                        "the SessionId set to a valid value."
                    )
                if ent.max_size is not None and self._size(db, ent) + len(drafts) > ent.max_size:
                    raise QuotaExceeded(f"The messaging entity '{ent.path}' is full ({ent.max_size} messages).")
            return self._deliver(db, ent, drafts, now)

    def cancel_scheduled(self, entity: EntityPath | str, sequence_numbers: Sequence[int]) -> None:
        """Cancel scheduled messages by sequence number."""
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
        seqs = self._reserve(db, ent, [d for d in drafts if d.seq is None])
        landing: list[_Draft] = []
        dead: list[tuple[_Draft, str, str]] = []
        for d in drafts:
            if d.seq is None:
                d.seq = next(seqs)
            if ent.kind == "subscription" and ent.requires_session and d.session_id is None:
                dead.append((d, SESSION_REASON, SESSION_DESCRIPTION))
            elif d.header_size() > HEADER_LIMIT:
                dead.append((d, HEADER_REASON, HEADER_DESCRIPTION))
            else:
                landing.append(d)
        if ent.forward_to and landing:
            immediate = [d for d in landing if d.scheduled_ms is None or d.scheduled_ms <= now]
            later = [d for d in landing if not (d.scheduled_ms is None or d.scheduled_ms <= now)]
            self._forward(db, ent, ent.forward_to, immediate, now)
            landing = later
        self._insert(db, ent, 0, landing, now)
        for d, reason, description in dead:
            self._dead_letter_drafts(db, ent, [d], reason, description, now)
        return [d.seq for d in drafts if d.seq is not None]

    def _fan_out(
        self, db: sqlite3.Connection, topic: _Entity, drafts: list[_Draft], now: int, *, fresh: bool = True
    ) -> list[int]:
        """Copy topic messages into every subscription whose rules take them."""
        if topic.requires_dup and fresh:
            drafts = self._dedup(db, topic, drafts, now)
        seqs = self._reserve(db, topic, [d for d in drafts if d.seq is None])
        for d in drafts:
            if d.seq is None:
                d.seq = next(seqs)
        due = [d for d in drafts if d.scheduled_ms is None or d.scheduled_ms <= now]
        # Scheduled topic messages wait in the topic and fan out when they materialise.
        self._insert(db, topic, 0, [d for d in drafts if d not in due], now)
        subs = [
            self._row_entity(r)
            for r in db.execute(f"SELECT {_ENTITY_COLS} FROM entity WHERE topic_id = ? ORDER BY id", (topic.id,))
        ]
        for sub in subs:
            if sub.status != "Active":
                continue
            accepted: list[_Draft] = []
            failed: list[tuple[_Draft, str, str]] = []
            rules = self._compiled_rules(db, sub)
            for d in due:
                try:
                    copy = self._apply_rules(rules, d)
                except _RuleError as err:
                    if sub.dl_on_filter_exc:
                        failed.append((replace(d, props=dict(d.props)), err.type_name, err.message))
                    continue
                if copy is not None:
                    if sub.default_ttl_ms > topic.default_ttl_ms:
                        # The smaller of topic and subscription TTL applies.
                        copy.ttl_ms = min(copy.ttl_ms or topic.default_ttl_ms, topic.default_ttl_ms)
                    accepted.append(copy)
            self._deliver(db, sub, accepted, now)
            for d, reason, description in failed:
                self._dead_letter_drafts(db, sub, [d], reason, description, now)
        return [d.seq for d in drafts if d.seq is not None]

    def _compiled_rules(self, db: sqlite3.Connection, sub: _Entity) -> list[tuple[str, Any, Any]]:
        from sbdlq.sqlfilter import compile_action, compile_filter

        out = []
        for name, ftype, text, action in db.execute(
            "SELECT name, filter_type, filter, action FROM rule WHERE entity_id = ? ORDER BY id", (sub.id,)
        ):
            key = (ftype, text)
            if key not in self._compiled:
                self._compiled[key] = json.loads(text) if ftype == "correlation" else compile_filter(text)
            flt = self._compiled[key]
            act = None
            if action:
                akey = ("action", action)
                if akey not in self._compiled:
                    self._compiled[akey] = compile_action(action)
                act = self._compiled[akey]
            out.append((name, flt, act))
        return out

    @staticmethod
    def _apply_rules(rules: list[tuple[str, Any, Any]], d: _Draft) -> _Draft | None:
        """The copy a subscription receives, or None when no rule matches."""
        from sbdlq.sqlfilter import FilterEvaluationError

        copy: _Draft | None = None
        for _name, flt, act in rules:
            system = d.system()
            if isinstance(flt, dict):
                matched = _correlation_matches(flt, system, d.props)
            else:
                try:
                    matched = flt.matches(system, d.props)
                except FilterEvaluationError as exc:
                    raise _RuleError(exc.type_name, exc.message)
            if not matched:
                continue
            if copy is None:
                copy = replace(d, props=dict(d.props))
            if act is not None:
                sys_now = copy.system()
                try:
                    act.apply(sys_now, copy.props)
                except FilterEvaluationError as exc:
                    raise _RuleError(exc.type_name, exc.message)
                copy.take_system(sys_now)
        return copy

    def _forward(self, db: sqlite3.Connection, src: _Entity, dest_path: str, drafts: list[_Draft], now: int) -> None:
        """Auto-forward; on too many hops or a destination that can't take it, the transfer DLQ."""
        if not drafts:
            return
        hops = drafts[0].hops + 1
        reason, description = HOPS_REASON, HOPS_DESCRIPTION
        dest: _Entity | None = None
        if hops > MAX_HOPS:
            pass
        else:
            row = db.execute(f"SELECT {_ENTITY_COLS} FROM entity WHERE path = ?", (dest_path,)).fetchone()
            if row is None:
                reason = "MessagingEntityNotFound"
                description = f"The messaging entity '{dest_path}' could not be found."
            else:
                dest = self._row_entity(row)
                if dest.status != "Active":
                    reason, description = "MessagingEntityDisabled", f"Messaging entity '{dest.path}' is disabled."
                    dest = None
                elif (
                    dest.kind == "queue"
                    and dest.max_size is not None
                    and (self._size(db, dest) + len(drafts) > dest.max_size)
                ):
                    reason, description = "QuotaExceeded", f"The messaging entity '{dest.path}' is full."
                    dest = None
        if dest is None:
            self._insert(
                db, src, 2, drafts, now, extra={DEAD_LETTER_REASON: reason, DEAD_LETTER_DESCRIPTION: description}
            )
            return
        moved = [replace(d, hops=hops, seq=None, props=dict(d.props)) for d in drafts]
        self._deliver(db, dest, moved, now)

    def _dead_letter_drafts(
        self, db: sqlite3.Connection, ent: _Entity, drafts: list[_Draft], reason: str, description: str, now: int
    ) -> None:
        """Dead-letter messages that never landed (or were just taken out of the main queue)."""
        extra = {DEAD_LETTER_REASON: reason, DEAD_LETTER_DESCRIPTION: description}
        if ent.forward_dlq_to:
            moved = []
            for d in drafts:
                props = dict(d.props)
                props.update(extra)
                moved.append(replace(d, props=props, dl_source=ent.path, scheduled_ms=None))
            self._forward(db, ent, ent.forward_dlq_to, moved, now)
            return
        self._insert(db, ent, 1, drafts, now, extra=extra)

    def _insert(
        self,
        db: sqlite3.Connection,
        ent: _Entity,
        queue: int,
        drafts: Iterable[_Draft],
        now: int,
        *,
        extra: dict[str, Any] | None = None,
    ) -> None:
        rows = []
        ceiling = ent.default_ttl_ms
        for d in drafts:
            if d.seq is None:
                d.seq = next(self._reserve(db, ent, [d]))
            props = d.props
            if extra:
                props = {**props, **extra}
            scheduled = d.scheduled_ms is not None and d.scheduled_ms > now and queue == 0
            enqueued = d.scheduled_ms if scheduled and d.scheduled_ms is not None else now
            ttl = min(d.ttl_ms, ceiling) if d.ttl_ms is not None else ceiling
            rows.append(
                (
                    ent.id,
                    queue,
                    d.seq,
                    2 if scheduled else 0,
                    d.message_id,
                    d.session_id,
                    d.correlation_id,
                    d.subject,
                    d.content_type,
                    d.reply_to,
                    d.reply_to_session_id,
                    d.to,
                    d.partition_key,
                    ttl,
                    enqueued,
                    min(enqueued + ttl, MAX_TIME_MS),
                    d.scheduled_ms if scheduled else None,
                    0,
                    d.dl_source,
                    d.hops,
                    dump_props(props),
                    d.body,
                    d.body_type,
                )
            )
        if rows:
            db.executemany(_INSERT, rows)

    def _reserve(self, db: sqlite3.Connection, ent: _Entity, drafts: Sequence[_Draft]) -> Iterator[int]:
        """Take a block of sequence numbers from the entity's counter."""
        n = len(drafts)
        if n == 0:
            return iter(())
        (end,) = db.execute(
            "UPDATE entity SET next_seq = next_seq + ? WHERE id = ? RETURNING next_seq", (n, ent.id)
        ).fetchone()
        return iter(range(end - n, end))

    def _dedup(self, db: sqlite3.Connection, ent: _Entity, drafts: list[_Draft], now: int) -> list[_Draft]:
        """Drop messages whose id was seen within the duplicate-detection window."""
        kept = []
        for d in drafts:
            if d.message_id is None:
                kept.append(d)
                continue
            row = db.execute(
                "SELECT seen_ms FROM dedup WHERE entity_id = ? AND message_id = ?", (ent.id, d.message_id)
            ).fetchone()
            if row is not None and row[0] > now - ent.dup_window_ms:
                continue
            db.execute("INSERT OR REPLACE INTO dedup VALUES (?,?,?)", (ent.id, d.message_id, now))
            kept.append(d)
        return kept

    def _size(self, db: sqlite3.Connection, ent: _Entity) -> int:
        return int(
            db.execute("SELECT COUNT(*) FROM message WHERE entity_id = ? AND queue = 0", (ent.id,)).fetchone()[0]
        )

    # ------------------------------------------------------------------ receiving

    def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        """Browse without locking: every state, expired messages included."""
        with self.store.read() as db:
            ent = self._queue_entity(db, address)
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM message WHERE entity_id = ? AND queue = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (ent.id, _QUEUE[address.sub_queue], max(from_sequence, 0), max(max_count, 0)),
            ).fetchall()
            return [self._message(r, ent, with_lock=False) for r in rows]

    def receive(
        self,
        address: Address,
        max_count: int,
        *,
        mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
        session_id: str | None = None,
    ) -> list[Message]:
        """Take up to max_count available messages, locked or deleted; never an expired one."""
        if max_count <= 0:
            return []
        now = self._now()
        queue = _QUEUE[address.sub_queue]
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            if queue == 0:
                self._materialize(db, ent, now)
            out: list[Message] = []
            after = -1
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
                rows = db.execute(sql + " ORDER BY seq LIMIT ?", (*args, want)).fetchall()
                if not rows:
                    break
                after = rows[-1][1]
                take = []
                for r in rows:
                    if queue == 0 and r[18] is not None and r[16] >= ent.max_delivery_count:
                        # Lock lapsed on its last allowed delivery: a lazy abandon.
                        self._dead_letter_rows(db, ent, [r[0]], MAX_DELIVERY_REASON, _mdc_text(ent), now)
                    elif queue == 0 and r[14] <= now:
                        self._expire_rows(db, ent, [r[0]], now)
                    else:
                        take.append(r)
                if not take:
                    continue
                if mode is ReceiveMode.RECEIVE_AND_DELETE:
                    for chunk in _chunks([r[0] for r in take]):
                        db.execute(f"DELETE FROM message WHERE id IN ({','.join('?' * len(chunk))})", chunk)
                    out.extend(self._message(r, ent, with_lock=False, delivered=True) for r in take)
                else:
                    until = now + ent.lock_duration_ms
                    locked = []
                    updates = []
                    for r in take:
                        token = str(uuid.uuid4())
                        updates.append((token, until, r[0]))
                        m = self._message(r, ent, with_lock=False, delivered=True)
                        m.lock_token = token
                        m.locked_until = from_epoch_ms(until)
                        locked.append(m)
                    db.executemany(
                        "UPDATE message SET lock_token = ?, locked_until_ms = ?, delivery_count = delivery_count + 1 "
                        "WHERE id = ?",
                        updates,
                    )
                    out.extend(locked)
            return out

    def receive_deferred(
        self, address: Address, sequence_numbers: Sequence[int], *, mode: ReceiveMode = ReceiveMode.PEEK_LOCK
    ) -> list[Message]:
        """Receive deferred messages by sequence number; MessageNotFound when one isn't deferred here."""
        now = self._now()
        queue = _QUEUE[address.sub_queue]
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
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
                m = self._message(r, ent, with_lock=False, delivered=True)
                if mode is ReceiveMode.RECEIVE_AND_DELETE:
                    db.execute("DELETE FROM message WHERE id = ?", (r[0],))
                else:
                    token = str(uuid.uuid4())
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
            held, lost = self._held(db, ent, address, lock_tokens, self._now())
            for chunk in _chunks([i for i, _ in held]):
                db.execute(f"DELETE FROM message WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            return lost

    def abandon(
        self, address: Address, lock_tokens: Sequence[str], properties: dict[str, Any] | None = None
    ) -> list[str]:
        """Release locks: the message is available again, or dead-lettered past MaxDeliveryCount."""
        now = self._now()
        with self.store.write() as db:
            ent = self._queue_entity(db, address)
            held, lost = self._held(db, ent, address, lock_tokens, now)
            if properties:
                self._modify(db, [i for i, _ in held], properties)
            if _QUEUE[address.sub_queue] != 0:
                self._unlock(db, [i for i, _ in held])
                return lost
            over = [i for i, r in held if r[16] >= ent.max_delivery_count]
            expired = [i for i, r in held if r[16] < ent.max_delivery_count and r[14] <= now]
            rest = [i for i, r in held if r[16] < ent.max_delivery_count and r[14] > now]
            self._dead_letter_rows(db, ent, over, MAX_DELIVERY_REASON, _mdc_text(ent), now)
            self._expire_rows(db, ent, expired, now)
            self._unlock(db, rest)
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
            held, lost = self._held(db, ent, address, lock_tokens, now)
            ids = [i for i, _ in held]
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
            held, lost = self._held(db, ent, address, lock_tokens, self._now())
            ids = [i for i, _ in held]
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
            held, _lost = self._held(db, ent, address, lock_tokens, now)
            until = now + ent.lock_duration_ms
            for chunk in _chunks([i for i, _ in held]):
                db.execute(
                    f"UPDATE message SET locked_until_ms = ? WHERE id IN ({','.join('?' * len(chunk))})",
                    (until, *chunk),
                )
            stamp = from_epoch_ms(until)
            assert stamp is not None
            return {r[17]: stamp for _, r in held}

    # ------------------------------------------------------------------ internals

    def _held(
        self, db: sqlite3.Connection, ent: _Entity, address: Address, tokens: Sequence[str], now: int
    ) -> tuple[list[tuple[int, tuple[Any, ...]]], list[str]]:
        """Rows whose lock the caller still holds, and the tokens it has lost."""
        queue = _QUEUE[address.sub_queue]
        found: dict[str, tuple[Any, ...]] = {}
        for chunk in _chunks(list(tokens)):
            for r in db.execute(
                f"SELECT {_COLUMNS} FROM message WHERE lock_token IN ({','.join('?' * len(chunk))}) "
                "AND entity_id = ? AND queue = ? AND locked_until_ms > ?",
                (*chunk, ent.id, queue, now),
            ):
                found[r[17]] = r
        held = [(found[t][0], found[t]) for t in dict.fromkeys(tokens) if t in found]
        lost = [t for t in tokens if t not in found]
        return held, lost

    def _unlock(self, db: sqlite3.Connection, ids: list[int]) -> None:
        for chunk in _chunks(ids):
            db.execute(
                "UPDATE message SET lock_token = NULL, locked_until_ms = NULL "
                f"WHERE id IN ({','.join('?' * len(chunk))})",
                chunk,
            )

    def _modify(self, db: sqlite3.Connection, ids: list[int], properties: dict[str, Any]) -> None:
        for i in ids:
            (text,) = db.execute("SELECT props FROM message WHERE id = ?", (i,)).fetchone()
            props = load_props(text)
            props.update(properties)
            db.execute("UPDATE message SET props = ? WHERE id = ?", (dump_props(props), i))

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
        extra = {}
        if reason is not None:
            extra[DEAD_LETTER_REASON] = reason
        if description is not None:
            extra[DEAD_LETTER_DESCRIPTION] = description
        if ent.forward_dlq_to:
            drafts = []
            for chunk in _chunks(ids):
                marks = ",".join("?" * len(chunk))
                for r in db.execute(f"SELECT {_COLUMNS} FROM message WHERE id IN ({marks}) ORDER BY seq", chunk):
                    d = _row_draft(r)
                    d.props.update(extra)
                    d.dl_source = ent.path
                    drafts.append(d)
                db.execute(f"DELETE FROM message WHERE id IN ({marks})", chunk)
            self._forward(db, ent, ent.forward_dlq_to, drafts, now)
            return
        for i in ids:
            (text,) = db.execute("SELECT props FROM message WHERE id = ?", (i,)).fetchone()
            props = load_props(text)
            props.update(extra)
            db.execute(
                "UPDATE message SET queue = 1, state = 0, lock_token = NULL, locked_until_ms = NULL, props = ? "
                "WHERE id = ?",
                (dump_props(props), i),
            )

    def _expire_rows(self, db: sqlite3.Connection, ent: _Entity, ids: list[int], now: int) -> None:
        if not ids:
            return
        if ent.dl_on_expiration:
            self._dead_letter_rows(db, ent, ids, TTL_REASON, TTL_DESCRIPTION, now)
            return
        for chunk in _chunks(ids):
            db.execute(f"DELETE FROM message WHERE id IN ({','.join('?' * len(chunk))})", chunk)

    def _materialize(self, db: sqlite3.Connection, ent: _Entity, now: int) -> None:
        """Scheduled messages whose time has come become active (topics fan them out)."""
        if ent.kind == "subscription" and ent.topic_id is not None:
            topic = self._row_entity(
                db.execute(f"SELECT {_ENTITY_COLS} FROM entity WHERE id = ?", (ent.topic_id,)).fetchone()
            )
            due = db.execute(
                f"SELECT {_COLUMNS} FROM message WHERE entity_id = ? AND queue = 0 AND state = 2 "
                "AND scheduled_ms <= ? ORDER BY seq",
                (topic.id, now),
            ).fetchall()
            if due:
                db.executemany("DELETE FROM message WHERE id = ?", [(r[0],) for r in due])
                drafts = []
                for r in due:
                    d = _row_draft(r)
                    d.scheduled_ms = None
                    drafts.append(d)
                # Scheduled messages keep the sequence numbers they were given when scheduled.
                self._fan_out(db, topic, drafts, now, fresh=False)
        db.execute(
            "UPDATE message SET state = 0, enqueued_ms = scheduled_ms, "
            f"expires_ms = MIN(scheduled_ms + ttl_ms, {MAX_TIME_MS}) "
            "WHERE entity_id = ? AND queue = 0 AND state = 2 AND scheduled_ms <= ?",
            (ent.id, now),
        )

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
    def _message(r: tuple[Any, ...], ent: _Entity, *, with_lock: bool, delivered: bool = False) -> Message:
        enqueued = from_epoch_ms(r[13])
        assert enqueued is not None
        state = r[2]
        return Message(
            sequence_number=r[1],
            body=bytes(r[22]),
            enqueued_time=enqueued,
            message_id=r[3],
            expires_at=from_epoch_ms(r[14]),
            delivery_count=r[16] + (1 if delivered else 0),
            subject=r[6],
            correlation_id=r[5],
            content_type=r[7],
            session_id=r[4],
            reply_to=r[8],
            reply_to_session_id=r[9],
            to=r[10],
            partition_key=r[11],
            time_to_live_s=r[12] / 1000 if r[12] is not None else None,
            application_properties=load_props(r[21]),
            dead_letter_source=r[19],
            scheduled_enqueue_time=from_epoch_ms(r[15]),
            state=_STATE_NAMES.get(state, "active"),
            lock_token=r[17] if with_lock else None,
            locked_until=from_epoch_ms(r[18]) if with_lock else None,
            body_type=r[23],
        )


_ENTITY_COLS = (
    "id, path, kind, topic_id, lock_duration_ms, max_delivery_count, default_ttl_ms, dl_on_expiration, "
    "dl_on_filter_exc, requires_session, requires_dup, dup_window_ms, forward_to, forward_dlq_to, status, max_size"
)


class _RuleError(Exception):
    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message


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


def _correlation_matches(flt: dict[str, Any], system: dict[str, Any], props: dict[str, Any]) -> bool:
    """Every property named in a correlation filter equals the message's."""
    for key, expected in flt.items():
        if key.lower() == "properties":
            for pk, pv in (expected or {}).items():
                if props.get(pk) != pv:
                    return False
            continue
        name = _CORRELATION_KEYS.get(key.lower())
        if name is None or system.get(name) != expected:
            return False
    return True


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


def _mdc_text(ent: _Entity) -> str:
    return f"Message could not be consumed after {ent.max_delivery_count} delivery attempts."


def _chunks(items: list[Any], size: int = _CHUNK) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
