"""Entities: create, update, delete and look up queues, topics and subscriptions."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from sbdlq.addresses import Address, validate_name
from sbdlq.models import MAX_TTL_S

from .errors import (
    EntityExists,
    EntityMissing,
    InvalidStatus,
    KindMismatch,
    LockDurationTooLong,
    MaxDeliveryCountTooHigh,
    MaxDeliveryCountTooLow,
    MaxMessageSizeOutOfRange,
    NotPositive,
    TopicNotReadable,
    UnknownEntityProperties,
)
from .rows import stamp
from .vocabulary import ENTITY_COLUMNS, MAX_LOCK_S, MAX_MESSAGE_KB, STATUSES, Entity, EntityKind, Queue

if TYPE_CHECKING:
    from sbdlq.entity_info import EntityInfo

_KNOWN_PROPS = frozenset(
    {
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
        "max_message_size_kb",
    }
)
# The columns create and update set, in the order of _settings' values.
_SETTINGS = (
    "kind", "topic_id", "lock_duration_ms", "max_delivery_count", "default_ttl_ms", "dl_on_expiration",
    "dl_on_filter_exc", "requires_session", "requires_dup", "dup_window_ms", "forward_to", "forward_dlq_to",
    "status", "max_size", "max_message_kb",
)  # fmt: skip
_INSERT_ENTITY = (
    f"INSERT INTO entity (path, {', '.join(_SETTINGS)}, created_ms, updated_ms, accessed_ms)"
    f" VALUES (?, {', '.join('?' * len(_SETTINGS))}, ?, ?, ?)"
)
_UPDATE_ENTITY = f"UPDATE entity SET {', '.join(f'{c} = ?' for c in _SETTINGS)}, updated_ms = ? WHERE path = ?"


def check_status(status: object) -> None:
    """InvalidStatus unless Active or Disabled."""
    if status not in STATUSES:
        raise InvalidStatus(status)


def _ms(seconds: float | None, default_ms: int) -> int:
    if seconds is None:
        return default_ms
    if seconds <= 0:
        raise NotPositive("durations must be positive")
    return int(round(min(seconds, MAX_TTL_S) * 1000))


def _settings(kind: str, topic_id: int | None, p: dict[str, Any]) -> tuple[Any, ...]:
    """The _SETTINGS column values for entity properties; BadInput on unknown or invalid ones."""
    unknown = set(p) - _KNOWN_PROPS
    if unknown:
        raise UnknownEntityProperties(unknown)
    mdc = int(p.get("max_delivery_count", 10))
    if mdc < 1:
        raise MaxDeliveryCountTooLow()
    if mdc > 2**31 - 1:
        raise MaxDeliveryCountTooHigh()
    lock_s = p.get("lock_duration_s")
    if lock_s is not None and lock_s > MAX_LOCK_S:
        raise LockDurationTooLong()
    status = p.get("status", "Active")
    check_status(status)
    for key in ("forward_to", "forward_dead_lettered_to"):
        if p.get(key):
            validate_name(str(p[key]), what=key.replace("_", " ") + " destination")
    return (
        kind,
        topic_id,
        _ms(p.get("lock_duration_s"), 60_000),
        mdc,
        _ms(p.get("default_ttl_s"), int(MAX_TTL_S * 1000)),
        1 if p.get("dead_lettering_on_expiration", False) else 0,
        1 if p.get("dead_lettering_on_filter_exceptions", True) else 0,
        1 if p.get("requires_session", False) else 0,
        1 if p.get("requires_duplicate_detection", False) else 0,
        _ms(p.get("duplicate_window_s"), 600_000),
        p.get("forward_to") or None,
        p.get("forward_dead_lettered_to") or None,
        status,
        p.get("max_size"),
        _message_kb(p.get("max_message_size_kb")),
    )


def _message_kb(value: Any) -> int | None:
    """MaxMessageSizeInKilobytes: None (the default) or 1 .. MAX_MESSAGE_KB."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MESSAGE_KB:
        raise MaxMessageSizeOutOfRange(value, MAX_MESSAGE_KB)
    return value


def put_entity(
    db: sqlite3.Connection,
    path: str,
    kind: str,
    topic_id: int | None,
    exist_ok: bool,
    props: dict[str, Any],
    now: int,
) -> Entity:
    """Create the entity (created, updated and accessed now), or with exist_ok update an existing
    one of the same kind (updated now)."""
    row = _settings(kind, topic_id, props)
    existing = db.execute("SELECT kind FROM entity WHERE path = ?", (path,)).fetchone()
    if existing:
        (existing_kind,) = existing
        if not exist_ok:
            raise EntityExists(path)
        if existing_kind != kind:
            raise KindMismatch(path, existing_kind, kind)
        db.execute(_UPDATE_ENTITY, (*row, now, path))
    else:
        db.execute(_INSERT_ENTITY, (path, *row, now, now, now))
    return entity_by_path(db, path)


def touch(db: sqlite3.Connection, ent: Entity, now: int) -> None:
    """Note a use of the entity (a message sent to it or received from it): its AccessedAt."""
    db.execute("UPDATE entity SET accessed_ms = ? WHERE id = ?", (now, ent.id))


def delete_entity(db: sqlite3.Connection, ent: Entity) -> None:
    """Delete an entity with its messages, rules and history (a topic with its subscriptions)."""
    ids = [ent.id]
    if ent.kind == EntityKind.TOPIC:
        ids += [i for (i,) in db.execute("SELECT id FROM entity WHERE topic_id = ?", (ent.id,))]
    for i in ids:
        db.execute("DELETE FROM message WHERE entity_id = ?", (i,))
        db.execute("DELETE FROM rule WHERE entity_id = ?", (i,))
        db.execute("DELETE FROM dedup WHERE entity_id = ?", (i,))
        db.execute("DELETE FROM session_lock WHERE entity_id = ?", (i,))
        db.execute("DELETE FROM entity WHERE id = ?", (i,))


def find_entity(db: sqlite3.Connection, path: str) -> Entity | None:
    """The entity at path, or None."""
    row = db.execute(f"SELECT {ENTITY_COLUMNS} FROM entity WHERE path = ?", (path,)).fetchone()
    return None if row is None else Entity(*row)


def entity_by_path(db: sqlite3.Connection, path: str) -> Entity:
    """The entity at path; EntityNotFound when missing."""
    ent = find_entity(db, path)
    if ent is None:
        raise EntityMissing(path)
    return ent


def entity_by_id(db: sqlite3.Connection, entity_id: int) -> Entity | None:
    """The entity with that id, or None (it was deleted)."""
    row = db.execute(f"SELECT {ENTITY_COLUMNS} FROM entity WHERE id = ?", (entity_id,)).fetchone()
    return None if row is None else Entity(*row)


def all_entities(db: sqlite3.Connection) -> list[Entity]:
    """Every entity, by path."""
    return [Entity(*r) for r in db.execute(f"SELECT {ENTITY_COLUMNS} FROM entity ORDER BY path")]


def subscriptions(db: sqlite3.Connection, topic: Entity) -> list[Entity]:
    """A topic's subscriptions, oldest first."""
    return [
        Entity(*r)
        for r in db.execute(f"SELECT {ENTITY_COLUMNS} FROM entity WHERE topic_id = ? ORDER BY id", (topic.id,))
    ]


def queue_entity(db: sqlite3.Connection, address: Address) -> Entity:
    """The queue or subscription an address reads from; BadInput for a topic."""
    ent = entity_by_path(db, str(address.entity))
    if ent.kind == EntityKind.TOPIC:
        raise TopicNotReadable(ent.path)
    return ent


def main_queue_size(db: sqlite3.Connection, ent: Entity) -> int:
    """Messages in the entity's main queue, every state."""
    sql = f"SELECT COUNT(*) FROM message WHERE entity_id = ? AND queue = {Queue.MAIN:d}"
    return int(db.execute(sql, (ent.id,)).fetchone()[0])


def info(db: sqlite3.Connection, e: Entity) -> EntityInfo:
    """The public description of an entity."""
    from sbdlq.entity_info import EntityInfo  # here: `count` describes no entity

    subs = 0
    if e.kind == EntityKind.TOPIC:
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
        duplicate_window_s=e.dup_window_ms / 1000,
        max_message_size_kb=e.max_message_bytes // 1024,
        created_at=stamp(e.created_ms),
        updated_at=stamp(e.updated_ms),
        accessed_at=stamp(e.accessed_ms),
    )
