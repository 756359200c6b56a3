"""The namespace's quotas (`Quotas`): checked when an entity is created and when a message is sent."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .errors import (
    EntityCountQuota,
    EntitySizeQuota,
    MaxMessageSizeOutOfRange,
    SubscriptionCountQuota,
    TimeToLiveOverQuota,
)
from .vocabulary import Entity, EntityKind, Quotas, message_size

if TYPE_CHECKING:
    from sbdlq.outbound import OutboundMessage


def _iso(seconds: float) -> str:
    """A duration as ISO 8601 (whole seconds), as the refusals name it."""
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return "PT" + "".join(f"{v}{u}" for v, u in ((h, "H"), (m, "M"), (sec, "S")) if v) if s else "PT0S"


def entity_props(quotas: Quotas, props: dict[str, Any]) -> dict[str, Any]:
    """The properties an entity is created or updated with under the quotas: a TTL or maximum
    message size past them refused; no TTL given: the quota's (the Microsoft emulator's default
    DefaultMessageTimeToLive is its maximum, PT1H)."""
    props = dict(props)
    if quotas.ttl_s is not None:
        ttl = props.get("default_ttl_s")
        if ttl is None:
            props["default_ttl_s"] = quotas.ttl_s
        elif isinstance(ttl, int | float) and ttl > quotas.ttl_s:
            raise TimeToLiveOverQuota(_iso(ttl), _iso(quotas.ttl_s))
    kb = props.get("max_message_size_kb")
    if quotas.message_kb is not None and isinstance(kb, int) and kb > quotas.message_kb:
        raise MaxMessageSizeOutOfRange(kb, quotas.message_kb)
    return props


def check_new_entity(db: sqlite3.Connection, quotas: Quotas, path: str) -> None:
    """A new queue or topic past the namespace's quota of them is refused (an existing one is an update)."""
    cap = quotas.queues_and_topics
    if cap is None or db.execute("SELECT 1 FROM entity WHERE path = ?", (path,)).fetchone():
        return
    (n,) = db.execute("SELECT COUNT(*) FROM entity WHERE kind IN ('queue', 'topic')").fetchone()
    if n >= cap:
        raise EntityCountQuota(cap, path)


def check_new_subscription(db: sqlite3.Connection, quotas: Quotas, topic: Entity, path: str) -> None:
    """A new subscription past its topic's quota of them is refused."""
    cap = quotas.subscriptions_per_topic
    if cap is None or db.execute("SELECT 1 FROM entity WHERE path = ?", (path,)).fetchone():
        return
    (n,) = db.execute("SELECT COUNT(*) FROM entity WHERE topic_id = ?", (topic.id,)).fetchone()
    if n >= cap:
        raise SubscriptionCountQuota(topic.path, cap, path)


def message_limit(quotas: Quotas, ent: Entity) -> int:
    """The largest message the entity takes under the quotas, in bytes."""
    limit = ent.max_message_bytes
    return limit if quotas.message_kb is None else min(limit, quotas.message_kb * 1024)


def entity_size(db: sqlite3.Connection, ent: Entity) -> int:
    """What an entity's messages hold, in bytes (bodies and properties; a topic: with its
    subscriptions'), every queue and state counted, as the service's entity size is."""
    ids = [ent.id]
    if ent.kind == EntityKind.TOPIC:
        ids += [i for (i,) in db.execute("SELECT id FROM entity WHERE topic_id = ?", (ent.id,))]
    marks = ", ".join("?" * len(ids))
    sql = (
        f"SELECT COALESCE(SUM(LENGTH(body) + COALESCE(LENGTH(props), 0)), 0) FROM message WHERE entity_id IN ({marks})"
    )
    (size,) = db.execute(sql, ids).fetchone()
    return int(size)


def check_send(db: sqlite3.Connection, quotas: Quotas, ent: Entity, messages: Sequence[OutboundMessage]) -> None:
    """A send that would take the entity past its size quota is refused, whole."""
    cap = quotas.entity_bytes
    if cap is None:
        return
    incoming = sum(message_size(m) for m in messages)
    # The whole store's pages bound every entity's size: while they fit, no entity can be over
    # (an O(1) answer; the exact sum reads every row of the entity, ~1 ms a thousand messages).
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    (page_size,) = db.execute("PRAGMA page_size").fetchone()
    if pages * page_size + incoming <= cap:
        return
    size = entity_size(db, ent)
    if size + incoming > cap:
        raise EntitySizeQuota(str(ent.kind).title(), ent.path, size, cap)


def capped_ttl(quotas: Quotas, messages: Sequence[OutboundMessage]) -> Sequence[OutboundMessage]:
    """The messages with their TimeToLive capped at the quota's, a message without one given it:
    as the Microsoft emulator, whose entities' TTL (the ceiling of their messages') is at most PT1H,
    a longer TTL is shortened, never refused. Entities made before the quotas applied are capped too."""
    cap = quotas.ttl_s
    if cap is None:
        return messages
    return [
        m if m.time_to_live_s is not None and m.time_to_live_s <= cap else replace(m, time_to_live_s=cap)
        for m in messages
    ]
