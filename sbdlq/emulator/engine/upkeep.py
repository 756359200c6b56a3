"""What the broker does on its own timers, run lazily: scheduled messages falling due and
locks lapsing."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..store import Store
from .entities import entity_by_id
from .locks import lapsed_exists, settle_lapsed
from .rows import message_rows, to_draft
from .vocabulary import Entity, EntityKind, State

if TYPE_CHECKING:
    from .router import Router

_DUE = f"state = {State.SCHEDULED:d} AND scheduled_ms <= ?"


def due_exists(db: sqlite3.Connection, now: int) -> bool:
    """Whether any scheduled message in the namespace has fallen due (an indexed probe)."""
    return db.execute(f"SELECT 1 FROM message WHERE {_DUE} LIMIT 1", (now,)).fetchone() is not None


def materialize_due(db: sqlite3.Connection, router: Router, now: int) -> None:
    """Scheduled messages whose time has come, in every entity: a topic fans them out, a
    forwarding queue forwards them, anywhere else they become active.

    Namespace-wide, because nobody receives from a topic or a forwarding queue: their
    destinations' receivers must see the messages fall due.
    """
    if not due_exists(db, now):
        return
    entity_ids = [eid for (eid,) in db.execute(f"SELECT DISTINCT entity_id FROM message WHERE {_DUE}", (now,))]
    for eid in entity_ids:
        ent = entity_by_id(db, eid)
        if ent is None:
            continue
        if ent.kind != EntityKind.TOPIC and not ent.forward_to:
            # Enqueued time and expiry were set from the scheduled time when it was sent.
            db.execute(f"UPDATE message SET state = {State.ACTIVE:d} WHERE entity_id = ? AND {_DUE}", (eid, now))
            continue
        due = message_rows(db, f"entity_id = ? AND {_DUE} ORDER BY seq", (eid, now))
        db.executemany("DELETE FROM message WHERE id = ?", [(r.id,) for r in due])
        drafts = []
        for r in due:
            d = to_draft(r)
            # It was enqueued at its scheduled time, however late this lazy step runs.
            d.enqueued_ms = d.scheduled_ms
            drafts.append(d)
        if ent.kind == EntityKind.TOPIC:
            # Scheduled messages keep the sequence numbers they were given when scheduled.
            router.fan_out(db, ent, drafts, now, fresh=False)
        elif ent.forward_to:
            router.forward(db, ent, ent.forward_to, drafts, now)


def upkeep(store: Store, router: Callable[[], Router], ent: Entity, now: int) -> None:
    """Before a read: settle due scheduled messages and lapsed locks, if there are any.

    Two cheap indexed probes; the write transaction is only taken when there's work (and
    the router, `router()`, only made then: a `count` with nothing due never loads it).
    """
    with store.read() as db:
        work = due_exists(db, now) or lapsed_exists(db, ent, now)
    if not work:
        return
    with store.write() as db:
        materialize_due(db, router(), now)
        fresh = entity_by_id(db, ent.id)
        if fresh is not None:
            settle_lapsed(db, router(), fresh, now)
