"""Writing messages into an entity's queues: the TTL ceiling, scheduling, expiry and
header-size rules, sequence numbers and duplicate detection.

`placement` and `over_header_limit` are the only places those rules are written. Two
writers apply them: `insert` (drafts, the general path) and `insert_outbound` (a plain
send straight from OutboundMessages, without the per-message drafts, where binding fewer
values per row is most of the speed).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from itertools import compress
from typing import Any, NamedTuple

from sbdlq.models import OutboundMessage
from sbdlq.timeparse import to_epoch_ms

from ..property_json import dump_props, encode_props
from .rows import chunks, marks
from .vocabulary import HEADER_LIMIT, MAX_TIME_MS, Draft, Entity, Queue, State, message_ids, outbound_optional, ttl_ms

_INSERT = (
    "INSERT INTO message (entity_id, queue, seq, state, message_id, session_id, correlation_id, "
    "subject, content_type, reply_to, reply_to_session_id, to_, partition_key, ttl_ms, enqueued_ms, "
    "expires_ms, scheduled_ms, delivery_count, dl_source, hops, props, body, body_type, amqp) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,?,?,?,?,?,?)"
)
# A message with only an id, a body and application properties, sent to a main queue.
_INSERT_SLIM = (
    "INSERT INTO message (entity_id, queue, seq, state, message_id, ttl_ms, enqueued_ms, expires_ms, "
    f"delivery_count, hops, props, body, body_type) VALUES (?, {Queue.MAIN:d}, ?, {State.ACTIVE:d}, ?, ?, ?, ?, "
    "0, 0, ?, ?, ?)"
)
# The optional properties of a message, in the order of Draft.optional and outbound_optional.
_OPTIONAL_COLS = ("session_id", "correlation_id", "subject", "content_type", "reply_to", "reply_to_session_id",
                  "to_", "partition_key")  # fmt: skip


@functools.lru_cache(maxsize=256)
def _insert_shaped(shape: tuple[bool, ...]) -> str:
    """The insert of a plain message that sets the optional columns marked in `shape`."""
    cols = [c for c, present in zip(_OPTIONAL_COLS, shape, strict=True) if present]
    names = "".join(f"{c}, " for c in cols)
    values = "?, " * len(cols)
    return (
        f"INSERT INTO message (entity_id, queue, seq, state, message_id, {names}ttl_ms, enqueued_ms, expires_ms, "
        f"delivery_count, hops, props, body, body_type) VALUES (?, {Queue.MAIN:d}, ?, {State.ACTIVE:d}, ?, "
        f"{values}?, ?, ?, 0, 0, ?, ?, ?)"
    )


@functools.lru_cache(maxsize=256)
def _shape(types: tuple[type, ...]) -> tuple[bool, ...] | None:
    """Which optional fields a message sets, from their types (None: none of them)."""
    shape = tuple(t is not type(None) for t in types)
    return shape if any(shape) else None


class Placement(NamedTuple):
    """Where and until when a message lives: what the timing rules decide."""

    state: State
    enqueued_ms: int
    ttl_ms: int
    expires_ms: int
    scheduled_ms: int | None


def placement(
    ceiling_ms: int,
    ttl: int | None,
    scheduled_ms: int | None,
    now: int,
    *,
    queue: Queue = Queue.MAIN,
    enqueued_ms: int | None = None,
) -> Placement:
    """The timing rules: the entity's default TTL is a ceiling; a main-queue message
    scheduled in the future waits (enqueued at its time); expiry counts from enqueuing,
    capped at the broker's DateTime.MaxValue."""
    ttl_ms_ = ceiling_ms if ttl is None else min(ttl, ceiling_ms)
    if queue == Queue.MAIN and scheduled_ms is not None and scheduled_ms > now:
        return Placement(State.SCHEDULED, scheduled_ms, ttl_ms_, min(scheduled_ms + ttl_ms_, MAX_TIME_MS), scheduled_ms)
    enqueued = now if enqueued_ms is None else enqueued_ms
    return Placement(State.ACTIVE, enqueued, ttl_ms_, min(enqueued + ttl_ms_, MAX_TIME_MS), None)


def header_size(fields: Sequence[str | None], props: dict[str, Any]) -> int:
    """Approximate encoded size of the properties and application properties sections."""
    size = 0
    for v in fields:
        if v:
            size += len(v)
    for k, v in props.items():
        size += len(k) + (len(v) if isinstance(v, str | bytes | bytearray) else 8)
    return size


def over_header_limit(
    fields: Sequence[str | None], props: dict[str, Any], props_text: str | None = None, fields_len: int | None = None
) -> bool:
    """The header-size rule: properties and application properties over HEADER_LIMIT.

    With the properties' JSON text and the fields' length, the exact sum is only taken
    near the limit: the text bounds it (each non-text value counts 8 bytes, at most 3
    more than its JSON).
    """
    if fields_len is not None:
        if props_text is None or not props:
            return fields_len > HEADER_LIMIT
        if fields_len + len(props_text) + 3 * len(props) <= HEADER_LIMIT:
            return False
    return header_size(fields, props) > HEADER_LIMIT


def reserve(db: sqlite3.Connection, ent: Entity, n: int) -> int:
    """Take a block of n sequence numbers from the entity's counter; returns the first."""
    (end,) = db.execute(
        "UPDATE entity SET next_seq = next_seq + ? WHERE id = ? RETURNING next_seq", (n, ent.id)
    ).fetchone()
    return int(end) - n


def number(db: sqlite3.Connection, ent: Entity, drafts: Sequence[Draft]) -> None:
    """Give drafts without a sequence number the entity's next ones."""
    unnumbered = [d for d in drafts if d.seq is None]
    if unnumbered:
        seq = reserve(db, ent, len(unnumbered))
        for d in unnumbered:
            d.seq = seq
            seq += 1


def _row(eid: int, queue: Queue, seq: int | None, p: Placement, message_id: str | None,
         optional: Sequence[str | None], dl_source: str | None, hops: int, props_text: str | None,
         body: bytes, body_type: str, amqp: bytes | None) -> tuple[Any, ...]:  # fmt: skip
    """The _INSERT values of one message."""
    return (eid, queue, seq, p.state, message_id, *optional, p.ttl_ms, p.enqueued_ms, p.expires_ms,
            p.scheduled_ms, dl_source, hops, props_text, body, body_type, amqp)  # fmt: skip


def insert(
    db: sqlite3.Connection,
    ent: Entity,
    queue: Queue,
    drafts: Sequence[Draft],
    now: int,
    *,
    extra: dict[str, Any] | None = None,
) -> None:
    """Store drafts in one of the entity's queues, numbering those that have no number yet."""
    if not drafts:
        return
    number(db, ent, drafts)
    ceiling = ent.default_ttl_ms
    rows = []
    for d in drafts:
        p = placement(ceiling, d.ttl_ms, d.scheduled_ms, now, queue=queue, enqueued_ms=d.enqueued_ms)
        props = {**d.props, **extra} if extra else d.props
        rows.append(_row(ent.id, queue, d.seq, p, d.message_id, d.optional(), d.dl_source, d.hops, dump_props(props),
                         d.body, d.body_type, d.amqp))  # fmt: skip
    db.executemany(_INSERT, rows)


def insert_outbound(
    db: sqlite3.Connection, ent: Entity, messages: Sequence[OutboundMessage], now: int
) -> tuple[list[int], list[Draft]]:
    """A plain send to a main queue: the sequence numbers, and the drafts the header-size
    rule refused (numbered, for the caller to dead-letter).

    Messages with nothing but an id, a body and application properties (bulk sends) take
    a statement binding 9 values instead of 23; messages of one shape share one statement
    binding only the optional fields they have.
    """
    n = len(messages)
    first = reserve(db, ent, n)
    ceiling = ent.default_ttl_ms
    default = placement(ceiling, None, None, now)
    eid = ent.id
    fresh_ids = message_ids(sum(1 for m in messages if m.message_id is None))
    slim: list[tuple[Any, ...]] = []
    full: list[tuple[Any, ...]] = []
    shaped: dict[tuple[bool, ...], list[tuple[Any, ...]]] = {}
    oversized: list[Draft] = []
    for seq, m in enumerate(messages, start=first):
        message_id = m.message_id
        if message_id is None:
            message_id = next(fresh_ids)
        optional = outbound_optional(m)
        # The optional fields it has, and their values: found by C-level maps, once per message.
        shape = _shape(tuple(map(type, optional)))
        values: tuple[str, ...] = ()
        if shape is None:
            fields_len = len(message_id)
        else:
            values = tuple(compress(optional, shape))  # type: ignore[arg-type]  # the shape leaves out the Nones
            fields_len = len(message_id) + sum(map(len, values))
        props = m.application_properties
        props_text = encode_props(props) if props else None
        # over_header_limit's own first test, inline for the messages far under the limit (nearly all).
        small = fields_len + (len(props_text) + 3 * len(props) if props_text else 0) <= HEADER_LIMIT
        if not small and over_header_limit((message_id, *optional), props, props_text, fields_len):
            d = Draft.of(m, message_id)
            d.seq = seq
            oversized.append(d)
            continue
        body = m.body if type(m.body) is bytes else bytes(m.body)
        # Messages with extra AMQP sections take the general statement: the bulk ones stay lean.
        if m.time_to_live_s is None and m.scheduled_enqueue_time is None and m.amqp is None:
            if shape is None:
                slim.append((eid, seq, message_id, default.ttl_ms, now, default.expires_ms, props_text, body,
                             m.body_type))  # fmt: skip
            else:
                shaped.setdefault(shape, []).append(
                    (eid, seq, message_id, *values, default.ttl_ms, now, default.expires_ms, props_text, body,
                     m.body_type)
                )  # fmt: skip
            continue
        ttl = None if m.time_to_live_s is None else ttl_ms(m.time_to_live_s)
        sched = None if m.scheduled_enqueue_time is None else to_epoch_ms(m.scheduled_enqueue_time)
        p = placement(ceiling, ttl, sched, now)
        full.append(_row(eid, Queue.MAIN, seq, p, message_id, optional, None, 0, props_text, body, m.body_type,
                         m.amqp))  # fmt: skip
    if slim:
        db.executemany(_INSERT_SLIM, slim)
    for shape, rows in shaped.items():
        db.executemany(_insert_shaped(shape), rows)
    if full:
        db.executemany(_INSERT, full)
    return list(range(first, first + n)), oversized


def dedup(db: sqlite3.Connection, ent: Entity, drafts: list[Draft], now: int, pruned: dict[int, int]) -> list[Draft]:
    """Drop messages whose id was seen within the duplicate-detection window.

    `pruned` remembers, per entity, when its history was last trimmed.
    """
    horizon = now - ent.dup_window_ms
    if pruned.get(ent.id, 0) < horizon:
        # History older than the window means nothing: drop it about once a window.
        db.execute("DELETE FROM dedup WHERE entity_id = ? AND seen_ms <= ?", (ent.id, horizon))
        pruned[ent.id] = now
    wanted = list({d.message_id for d in drafts if d.message_id is not None})
    seen: set[str] = set()
    for chunk in chunks(wanted):
        seen.update(
            message_id
            for (message_id,) in db.execute(
                f"SELECT message_id FROM dedup WHERE entity_id = ? AND message_id IN ({marks(chunk)}) AND seen_ms > ?",
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
