"""Message rows by name: the SELECT column lists, defined once next to their row types.

Rows are NamedTuples built from the cursor's plain tuples (one C-level tuple copy per
row), so the hot receive and peek paths read fields by name at tuple speed.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from ..property_json import load_props
from .vocabulary import CHUNK, MAX_TIME_MS, NEVER_MS, STATE_NAMES, Draft, State

if TYPE_CHECKING:
    from sbdlq.messages import Message


class MessageRow(NamedTuple):
    """A whole message row; MESSAGE_COLUMNS selects it."""

    id: int
    seq: int
    state: int
    message_id: str | None
    session_id: str | None
    correlation_id: str | None
    subject: str | None
    content_type: str | None
    reply_to: str | None
    reply_to_session_id: str | None
    to_: str | None
    partition_key: str | None
    ttl_ms: int | None
    enqueued_ms: int
    expires_ms: int
    scheduled_ms: int | None
    delivery_count: int
    lock_token: str | None
    locked_until_ms: int | None
    dl_source: str | None
    hops: int
    props: str | None
    body: bytes
    body_type: str
    amqp: bytes | None


MESSAGE_COLUMNS = ", ".join(MessageRow._fields)


class LockRow(NamedTuple):
    """What settling a lock needs (see locks.release); LOCK_COLUMNS selects it."""

    lock_token: str
    id: int
    queue: int
    state: int
    delivery_count: int
    expires_ms: int


LOCK_COLUMNS = ", ".join(LockRow._fields)


# tuple.__new__ bound to the row type: a C-level copy per row (NamedTuple._make is a Python call).
_as_message_row: Callable[[tuple[Any, ...]], MessageRow] = functools.partial(tuple.__new__, MessageRow)
_as_lock_row: Callable[[tuple[Any, ...]], LockRow] = functools.partial(tuple.__new__, LockRow)


def message_rows(db: sqlite3.Connection, where: str, args: Iterable[Any]) -> list[MessageRow]:
    """`SELECT MESSAGE_COLUMNS FROM message WHERE <where>` as named rows."""
    return list(map(_as_message_row, db.execute(f"SELECT {MESSAGE_COLUMNS} FROM message WHERE {where}", tuple(args))))


# A page of a queue in sequence order, every state: one range of the index (entity_id, queue,
# state, seq) per state, merged. `seq >= ?` over the queue as a whole reads, and sorts, every
# message after the page: paging through a large DLQ that way was quadratic.
_PAGE = (
    " UNION ALL ".join(
        f"SELECT * FROM (SELECT {MESSAGE_COLUMNS} FROM message WHERE entity_id = ?1 AND queue = ?2 "
        f"AND state = {s:d} AND seq >= ?3 ORDER BY seq LIMIT ?4)"
        for s in State
    )
    + " ORDER BY seq LIMIT ?4"
)


def page_rows(db: sqlite3.Connection, entity_id: int, queue: int, from_sequence: int, limit: int) -> list[MessageRow]:
    """Up to `limit` messages of one of an entity's queues from a sequence number on, in order."""
    return list(map(_as_message_row, db.execute(_PAGE, (entity_id, queue, from_sequence, limit))))


def lock_rows(cursor: Iterable[tuple[Any, ...]]) -> list[LockRow]:
    """A cursor over `SELECT LOCK_COLUMNS ...` as named rows."""
    return list(map(_as_lock_row, cursor))


def _first_message(*fields: Any) -> Message:
    """Message(*fields), the class imported on the first call and bound to `_new_message` for
    every later one: `count` makes no Message, and the peek path pays no import per message."""
    global _new_message
    from sbdlq.messages import Message

    _new_message = Message
    return Message(*fields)


_new_message: Callable[..., Message] = _first_message


def to_message(r: MessageRow, *, delivered: bool = False) -> Message:
    """The Message a row is; `delivered` counts the delivery being made now. No lock shown."""
    # One unpack into named locals: the hot peek and receive paths, where it's the fastest read.
    (_id, seq, state, message_id, session_id, correlation_id, subject, content_type, reply_to, reply_to_session_id,
     to, partition_key, ttl, enqueued, expires, scheduled, delivery_count, _token, _until, dl_source, _hops, props,
     body, body_type, amqp) = r  # fmt: skip
    # Positional, in Message's field order (a test holds the two together): 23 keywords per
    # message cost more than the rest of the conversion.
    return _new_message(
        seq,
        body if type(body) is bytes else bytes(body),
        stamp(enqueued),
        message_id,
        # The broker's DateTime.MaxValue means "never": shown as null, as the SDK does.
        stamp(expires) if expires < MAX_TIME_MS else None,
        delivery_count + 1 if delivered else delivery_count,
        subject,
        correlation_id,
        content_type,
        session_id,
        reply_to,
        reply_to_session_id,
        to,
        partition_key,
        # A message that never expires has no time to live worth showing.
        ttl / 1000 if ttl is not None and ttl < NEVER_MS else None,
        _props(props) if props else {},
        dl_source,
        stamp(scheduled) if scheduled is not None else None,
        STATE_NAMES.get(state, "active"),
        None,  # lock_token
        None,  # locked_until
        body_type,
        amqp,
    )


def to_draft(r: MessageRow) -> Draft:
    """A stored message on its way somewhere else (forwarding, a falling-due topic message)."""
    return Draft(
        body=bytes(r.body),
        message_id=r.message_id,
        session_id=r.session_id,
        correlation_id=r.correlation_id,
        subject=r.subject,
        content_type=r.content_type,
        reply_to=r.reply_to,
        reply_to_session_id=r.reply_to_session_id,
        to=r.to_,
        partition_key=r.partition_key,
        ttl_ms=r.ttl_ms,
        scheduled_ms=r.scheduled_ms,
        props=load_props(r.props),
        body_type=r.body_type,
        hops=r.hops,
        dl_source=r.dl_source,
        seq=r.seq,
        amqp=r.amqp,
    )


@functools.lru_cache(maxsize=4096)
def stamp(ms: int) -> datetime:
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


def chunks(items: list[Any], size: int = CHUNK) -> Iterable[list[Any]]:
    """items in slices small enough to bind in one statement."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def marks(chunk: list[Any]) -> str:
    """The `?,?,...` of an IN list over chunk."""
    return ",".join("?" * len(chunk))


def delete_ids(db: sqlite3.Connection, ids: list[int]) -> None:
    """Delete message rows by id."""
    for chunk in chunks(ids):
        db.execute(f"DELETE FROM message WHERE id IN ({marks(chunk)})", chunk)
