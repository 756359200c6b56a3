"""The Engine: the namespace's public operations, each one transaction over the store.

The rules live in the modules beside this one (entities, router, inserts, locks,
upkeep); each method here opens the transaction, checks what the caller may do, and
calls them.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sbdlq.addresses import Address, EntityPath, SubQueue, parse_address, validate_name
from sbdlq.models import Counts, ReceiveMode

from ..store import Store
from . import entities, locks
from . import quotas as quota_rules
from .errors import (
    AlreadyDeadLettered,
    EntityFull,
    EntityIsDisabled,
    IdTooLong,
    MessageTooLarge,
    NotASubscription,
    NotATopic,
    RuleExists,
    RuleMissing,
    RuleNotAsRead,
    ScheduledMissing,
    SendToSubscription,
    SessionIdMissing,
    TopicHasNoCounts,
)
from .rows import chunks, delete_ids, marks, page_rows, stamp, to_message
from .upkeep import materialize_due, upkeep
from .vocabulary import (
    GENEROUS,
    MAX_ID_CHARS,
    DeadLetterCause,
    Draft,
    Entity,
    EntityKind,
    Queue,
    Quotas,
    Rule,
    State,
    message_ids,
    message_size,
)

if TYPE_CHECKING:
    from sbdlq.entity_info import EntityInfo
    from sbdlq.messages import Message
    from sbdlq.outbound import Choose, MovedBatch, OutboundMessage

    # Loaded where a method first needs them (sessions, rules, the router and, through it,
    # inserts and the SQL filter): `count` needs none of them.
    from .router import Router
    from .sessions import AcceptedSession

_UPKEEP_EVERY_MS = 1000


class Engine:
    """A Service Bus namespace held in one SQLite file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] | None = None,
        busy_timeout_s: float | None = None,
        quotas: Quotas = GENEROUS,
    ) -> None:
        self.path = os.fspath(path)
        self.quotas = quotas
        self.store = Store(self.path, busy_timeout_s=busy_timeout_s)
        self.clock = clock or time.time
        self._upkeep_at: dict[int, int] = {}

    @functools.cached_property
    def _router(self) -> Router:
        """The router, made where a call first routes (here: `count` with nothing due never does)."""
        from .router import Router

        return Router()

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
        return self._create(name, EntityKind.QUEUE, exist_ok, props)

    def create_topic(self, name: str, *, exist_ok: bool = False, **props: Any) -> EntityInfo:
        """Create a topic (or, with exist_ok, update its properties)."""
        validate_name(name, what="topic")
        return self._create(name, EntityKind.TOPIC, exist_ok, props)

    def _create(self, path: str, kind: EntityKind, exist_ok: bool, props: dict[str, Any]) -> EntityInfo:
        props = quota_rules.entity_props(self.quotas, props)
        with self.store.write() as db:
            quota_rules.check_new_entity(db, self.quotas, path)
            ent = entities.put_entity(db, path, kind.value, None, exist_ok, props, self._now())
            return entities.info(db, ent)

    def create_subscription(
        self, topic: str, name: str, *, rules: list[Rule] | None = None, exist_ok: bool = False, **props: Any
    ) -> EntityInfo:
        """Create a subscription with its rules (default: one rule that takes everything).

        With exist_ok and no rules, an existing subscription keeps the rules it has.
        """
        from .rules import check_rule, store_rules  # here: `count` reads no rule

        path = str(EntityPath(topic, name))
        parse_address(path)  # validates both names
        checked = [check_rule(r) for r in rules] if rules is not None else None
        props = quota_rules.entity_props(self.quotas, props)
        with self.store.write() as db:
            topic_ent = entities.entity_by_path(db, topic)
            if topic_ent.kind != EntityKind.TOPIC:
                raise NotATopic(topic, topic_ent.kind)
            existed = entities.find_entity(db, path) is not None
            quota_rules.check_new_subscription(db, self.quotas, topic_ent, path)
            kind = EntityKind.SUBSCRIPTION.value
            ent = entities.put_entity(db, path, kind, topic_ent.id, exist_ok, props, self._now())
            info = entities.info(db, ent)
            if checked is None:
                if existed:
                    return info
                checked = [Rule.true()]
            store_rules(db, ent.id, checked)
        return info

    def delete_entity(self, entity: EntityPath | str) -> None:
        """Delete an entity with its messages (a topic with its subscriptions)."""
        with self.store.write() as db:
            entities.delete_entity(db, entities.entity_by_path(db, str(entity)))

    def set_status(self, entity: EntityPath | str, status: str) -> None:
        """Enable or disable an entity (`Active` | `Disabled`)."""
        entities.check_status(status)
        with self.store.write() as db:
            ent = entities.entity_by_path(db, str(entity))
            db.execute("UPDATE entity SET status = ? WHERE id = ?", (status, ent.id))

    def reset(self) -> None:
        """Delete every entity and message."""
        with self.store.write() as db:
            for table in ("message", "rule", "dedup", "session_lock", "entity"):
                db.execute(f"DELETE FROM {table}")

    def list_entities(self) -> list[EntityInfo]:
        """Every queue, topic and subscription, topics followed by their subscriptions."""
        with self.store.read() as db:
            return [entities.info(db, e) for e in entities.all_entities(db)]

    def get_entity(self, entity: EntityPath | str) -> EntityInfo:
        """One entity; EntityNotFound when missing."""
        with self.store.read() as db:
            return entities.info(db, entities.entity_by_path(db, str(entity)))

    def max_message_bytes(self, entity: EntityPath | str) -> int:
        """The largest message the entity takes (a subscription: its topic's), in bytes."""
        with self.store.read() as db:
            ent = entities.entity_by_path(db, str(entity))
            if ent.topic_id is not None:
                ent = entities.entity_by_id(db, ent.topic_id) or ent
            return quota_rules.message_limit(self.quotas, ent)

    def subscription_names(self, topic: EntityPath | str) -> list[str]:
        """The names of a topic's subscriptions; EntityNotFound when there is no such topic."""
        with self.store.read() as db:
            ent = entities.entity_by_path(db, str(topic))
            if ent.kind != EntityKind.TOPIC:
                raise NotATopic(ent.path, ent.kind)
            return [s.path.rsplit("/", 1)[-1] for s in entities.subscriptions(db, ent)]

    def rules(self, entity: EntityPath | str) -> list[Rule]:
        """A subscription's rules."""
        from .rules import read_rules  # here: `count` reads no rule

        with self.store.read() as db:
            return read_rules(db, entities.entity_by_path(db, str(entity)).id)

    def add_rule(
        self, subscription: EntityPath | str, rule: Rule, *, replace: bool = False, expected: Rule | None = None
    ) -> Rule:
        """Add a rule to a subscription (RuleExists if its name is taken), or with replace
        change an existing one in place (RuleMissing if there is none). With `expected`, only
        while the held rule equals it (RuleNotAsRead otherwise), checked in the same write."""
        from .rules import check_rule, find_rule_id, put_rule  # here: `count` reads no rule

        checked = check_rule(rule)
        with self.store.write() as db:
            sub = self._subscription(db, subscription)
            if expected is not None:
                self._expect(db, sub, rule.name, expected)
            held = find_rule_id(db, sub.id, rule.name)
            if held is not None and not replace:
                raise RuleExists(sub.path, rule.name)
            if held is None and replace:
                raise RuleMissing(sub.path, rule.name)
            put_rule(db, sub.id, checked, held)
        return checked

    def remove_rule(self, subscription: EntityPath | str, name: str, *, expected: Rule | None = None) -> None:
        """Remove a subscription's rule; RuleMissing if it has none of that name. With
        `expected`, only while the held rule equals it (RuleNotAsRead otherwise)."""
        from .rules import find_rule_id  # here: `count` reads no rule

        with self.store.write() as db:
            sub = self._subscription(db, subscription)
            if expected is not None:
                self._expect(db, sub, name, expected)
            held = find_rule_id(db, sub.id, name)
            if held is None:
                raise RuleMissing(sub.path, name)
            db.execute("DELETE FROM rule WHERE id = ?", (held,))

    @staticmethod
    def _expect(db: sqlite3.Connection, sub: Entity, name: str, expected: Rule) -> None:
        """RuleNotAsRead unless the subscription's rule of that name is `expected` (inside the write:
        no other writer can change it between this check and the change)."""
        from .rules import read_rules  # here: `count` reads no rule

        held = [r for r in read_rules(db, sub.id) if r.name.casefold() == name.casefold()]
        if held != [expected]:
            raise RuleNotAsRead(name, sub.path)

    @staticmethod
    def _subscription(db: sqlite3.Connection, path: EntityPath | str) -> Entity:
        ent = entities.entity_by_path(db, str(path))
        if ent.kind != EntityKind.SUBSCRIPTION:
            raise NotASubscription(ent.path, ent.kind)
        return ent

    def counts(self, entity: EntityPath | str) -> Counts:
        """Message counts of a queue or subscription.

        Expired messages count until a receiver removes them (the service expires lazily);
        deferred messages count as active, as the service counts them. What the broker does
        on its own timers (scheduled messages falling due, locks lapsing) is settled first.
        """
        now = self._now()
        with self.store.read() as db:
            ent = entities.entity_by_path(db, str(entity))
            if ent.kind == EntityKind.TOPIC:
                raise TopicHasNoCounts(ent.path)
        upkeep(self.store, lambda: self._router, ent, now)
        with self.store.read() as db:
            c = Counts(entity=ent.path)
            for queue, sched, n in db.execute(
                f"SELECT queue, state = {State.SCHEDULED:d} AND scheduled_ms > ?, COUNT(*) FROM message "
                "WHERE entity_id = ? GROUP BY 1, 2",
                (now, ent.id),
            ):
                if queue == Queue.DEAD_LETTER:
                    c.dead_letter += n
                elif queue == Queue.TRANSFER_DEAD_LETTER:
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
            ent = entities.entity_by_path(db, str(entity))
            if ent.kind == EntityKind.SUBSCRIPTION:
                raise SendToSubscription(ent.path)
            if ent.status != "Active":
                raise EntityIsDisabled(ent.path)
            if not messages:
                return []
            entities.touch(db, ent, now)
            limit = quota_rules.message_limit(self.quotas, ent)
            for m in messages:
                if len(m.body) > limit or message_size(m) > limit:
                    raise MessageTooLarge(ent.path, message_size(m), limit)
                for name, value in (("MessageId", m.message_id), ("SessionId", m.session_id)):
                    if value is not None and len(value) > MAX_ID_CHARS:
                        raise IdTooLong(name, value[:16], len(value))
            quota_rules.check_send(db, self.quotas, ent, messages)
            messages = quota_rules.capped_ttl(self.quotas, messages)
            if ent.kind == EntityKind.QUEUE:
                if ent.requires_session and any(m.session_id is None for m in messages):
                    raise SessionIdMissing()
                if ent.max_size is not None and entities.main_queue_size(db, ent) + len(messages) > ent.max_size:
                    raise EntityFull(ent.path, ent.max_size)
                if not ent.requires_dup and not ent.forward_to:
                    return self._router.send_plain(db, ent, messages, now)
            ids = message_ids(sum(1 for m in messages if m.message_id is None))
            drafts = [Draft.of(m, None if m.message_id is not None else next(ids)) for m in messages]
            return self._router.deliver(db, ent, drafts, now)

    def send_and_complete(
        self,
        entity: EntityPath | str,
        messages: Sequence[OutboundMessage],
        address: Address,
        lock_tokens: Sequence[str],
    ) -> list[str]:
        """Send messages[i] as the copy of the message locked by lock_tokens[i], and complete
        those originals, in one transaction: on any error neither happened.

        The copies go through `send` (every rule of a send applies); the copy of an original
        whose lock was lost is not sent. Returns the lost tokens.
        """
        if len(messages) != len(lock_tokens):
            raise ValueError("one copy per lock token")
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            # Completed first, sent second: the same transaction, so the order shows only in
            # what a failed send rolls back (both).
            lost = locks.complete_held(db, ent, Queue.of(address.sub_queue), lock_tokens, self._now())
            if lost:
                gone = set(lost)
                messages = [m for m, t in zip(messages, lock_tokens, strict=True) if t not in gone]
            if messages:
                self.send(entity, messages)  # joins this transaction
            return lost

    def move_available(
        self,
        address: Address,
        target: EntityPath | str,
        *,
        after_sequence: int,
        max_count: int,
        choose: Choose,
    ) -> MovedBatch:
        """Read up to max_count available messages of a dead-letter queue after `after_sequence`
        (as a receive would see them, delivery counted) and, in the same transaction, send the
        copies `choose` pairs with some of them and delete those originals.

        Nothing is locked: the transaction is the lock. On any error (a copy `send` refuses, or
        `choose` raising) neither happened, and a kill leaves both or neither.
        """
        from sbdlq.outbound import MovedBatch  # here: `count` moves nothing

        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            materialize_due(db, self._router, now)
            locks.settle_lapsed(db, self._router, ent, now)
            rows = locks.available_rows(db, ent, Queue.of(address.sub_queue), after_sequence, max_count, now)
            if not rows:
                return MovedBatch(0, 0, after_sequence)
            messages = [to_message(r, delivered=True) for r in rows]
            pairs = choose(messages)
            if pairs:
                row_of = {m.sequence_number: r.id for m, r in zip(messages, rows, strict=True)}
                delete_ids(db, [row_of[m.sequence_number] for m, _ in pairs])
                self.send(target, [copy for _, copy in pairs])  # joins this transaction
            return MovedBatch(len(rows), len(pairs), rows[-1].seq)

    def cancel_scheduled(self, entity: EntityPath | str, sequence_numbers: Sequence[int]) -> None:
        """Cancel scheduled messages by sequence number, all or none: a number that is not a
        message of the entity still scheduled (one that fell due, was cancelled, never was)
        refuses the call with Service Bus's MessageNotFound, naming the missing numbers."""
        now = self._now()
        wanted = sorted(set(sequence_numbers))
        with self.store.write() as db:
            ent = entities.entity_by_path(db, str(entity))
            materialize_due(db, self._router, now)  # what fell due is no longer scheduled
            found: set[int] = set()
            for chunk in chunks(wanted):
                found.update(
                    seq
                    for (seq,) in db.execute(
                        f"SELECT seq FROM message WHERE entity_id = ? AND queue = {Queue.MAIN:d} "
                        f"AND state = {State.SCHEDULED:d} AND seq IN ({marks(chunk)})",
                        (ent.id, *chunk),
                    )
                )
            missing = [n for n in wanted if n not in found]
            if missing:
                raise ScheduledMissing(", ".join(map(str, missing)))
            for chunk in chunks(wanted):
                db.execute(
                    f"DELETE FROM message WHERE entity_id = ? AND queue = {Queue.MAIN:d} "
                    f"AND state = {State.SCHEDULED:d} AND seq IN ({marks(chunk)})",
                    (ent.id, *chunk),
                )

    # ------------------------------------------------------------------ receiving

    def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        """Browse without locking: every state, expired messages included."""
        now = self._now()
        with self.store.read() as db:
            ent = entities.queue_entity(db, address)
        # Paging through a DLQ asks again and again: the broker's timers are settled on the
        # first page and then at most once a second, not on every page.
        if from_sequence <= 0 or now - self._upkeep_at.get(ent.id, -_UPKEEP_EVERY_MS) >= _UPKEEP_EVERY_MS:
            upkeep(self.store, lambda: self._router, ent, now)
            self._upkeep_at[ent.id] = now
        with self.store.read() as db:
            rows = page_rows(db, ent.id, Queue.of(address.sub_queue), max(from_sequence, 0), max(max_count, 0))
            return [to_message(r) for r in rows]

    def receive(
        self,
        address: Address,
        max_count: int,
        *,
        mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
        session_id: str | None = None,
        holder: str | None = None,
    ) -> list[Message]:
        """Take up to max_count available messages, locked or deleted; never an expired one.

        A receiver on the main queue is what expires messages (lazily, as the service does):
        expired ones met on the way are dropped or dead-lettered. With a session id and a
        holder, the holder must still hold that session (SessionLockLost otherwise).
        """
        from . import sessions  # here: `count` takes no session

        if max_count <= 0:
            return []
        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            held = None
            if session_id is not None and holder is not None:
                held = sessions.check_held(db, ent, session_id, holder, now)
            materialize_due(db, self._router, now)
            locks.settle_lapsed(db, self._router, ent, now)
            queue = Queue.of(address.sub_queue)
            got = locks.take_available(db, self._router, ent, queue, max_count, mode, session_id, now)
            if got:
                entities.touch(db, ent, now)
            if held is not None and session_id is not None and mode is ReceiveMode.PEEK_LOCK:
                sessions.bind_message_locks(db, ent, session_id, held.locked_until_ms, now)
                for m in got:
                    m.locked_until = stamp(held.locked_until_ms)
            return got

    # ------------------------------------------------------------------ sessions

    def accept_session(self, address: Address, session_id: str | None, holder: str) -> AcceptedSession:
        """Lock a session for holder: the one named, or (None) the oldest one with messages that
        nobody holds. SessionCannotBeLocked when another holder has the named one;
        NoSessionAvailable when none is free."""
        from . import sessions  # here: `count` takes no session

        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            materialize_due(db, self._router, now)
            locks.settle_lapsed(db, self._router, ent, now)
            sid = session_id if session_id is not None else sessions.next_free(db, ent, now)
            return sessions.AcceptedSession(sid, stamp(sessions.lock(db, ent, sid, holder, now)))

    def renew_session_lock(self, address: Address, session_id: str, holder: str | None = None) -> datetime:
        """Extend a held session lock by the lock duration; SessionLockLost when it is gone."""
        from . import sessions  # here: `count` takes no session

        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            return stamp(sessions.renew(db, ent, session_id, holder, now))

    def release_session(self, address: Address, session_id: str, holder: str) -> None:
        """Let a session go (its receiver closed), if holder still has it."""
        from . import sessions  # here: `count` takes no session

        with self.store.write() as db:
            sessions.unlock(db, entities.queue_entity(db, address), session_id, holder)

    def session_state(self, address: Address, session_id: str, holder: str | None = None) -> bytes | None:
        """A held session's state (None when never set or cleared)."""
        from . import sessions  # here: `count` takes no session

        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            return sessions.check_held(db, ent, session_id, holder, self._now()).state

    def set_session_state(
        self, address: Address, session_id: str, state: bytes | None, holder: str | None = None
    ) -> None:
        """Set (None: clear) a held session's state."""
        from . import sessions  # here: `count` takes no session

        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            sessions.check_held(db, ent, session_id, holder, now)
            sessions.set_state(db, ent, session_id, state, now)

    def list_sessions(
        self, address: Address, *, updated_after: datetime | None = None, skip: int = 0, top: int = 100
    ) -> list[str]:
        """Session ids: with updated_after, those whose state was set after it; otherwise those
        with messages or a stored state."""
        from . import sessions  # here: `count` takes no session

        after = None if updated_after is None else int(updated_after.timestamp() * 1000)
        with self.store.read() as db:
            ent = entities.queue_entity(db, address)
            return sessions.listed(db, ent, after, max(skip, 0), max(top, 0))

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
            ent = entities.queue_entity(db, address)
            cur = db.execute(
                "DELETE FROM message WHERE id IN (SELECT id FROM message WHERE entity_id = ? AND queue = ? "
                f"AND state = {State.ACTIVE:d} AND (locked_until_ms IS NULL OR locked_until_ms <= ?) "
                "ORDER BY seq LIMIT ?)",
                (ent.id, Queue.of(address.sub_queue), now, max_count),
            )
            return max(cur.rowcount, 0)

    def delete_messages(self, address: Address, max_count: int, *, before: datetime | None = None) -> int:
        """Batch delete: up to max_count of the oldest available messages enqueued before `before` (None: now).

        What the broker's `$management` batch-delete-messages does: locked, deferred and
        scheduled messages stay; how many were deleted.
        """
        if max_count <= 0:
            return 0
        now = self._now()
        cutoff = now if before is None else int(before.timestamp() * 1000)
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            if address.sub_queue is SubQueue.NONE:
                locks.settle_lapsed(db, self._router, ent, now)
            cur = db.execute(
                "DELETE FROM message WHERE id IN (SELECT id FROM message WHERE entity_id = ? AND queue = ? "
                f"AND state = {State.ACTIVE:d} AND (locked_until_ms IS NULL OR locked_until_ms <= ?) "
                "AND enqueued_ms < ? ORDER BY seq LIMIT ?)",
                (ent.id, Queue.of(address.sub_queue), now, cutoff, max_count),
            )
            return max(cur.rowcount, 0)

    def receive_deferred(
        self, address: Address, sequence_numbers: Sequence[int], *, mode: ReceiveMode = ReceiveMode.PEEK_LOCK
    ) -> list[Message]:
        """Receive deferred messages by sequence number; MessageNotFound when one isn't deferred here."""
        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            locks.settle_lapsed(db, self._router, ent, now)
            return locks.take_deferred(db, ent, Queue.of(address.sub_queue), sequence_numbers, mode, now)

    # ------------------------------------------------------------------ settlement

    def complete(self, address: Address, lock_tokens: Sequence[str]) -> list[str]:
        """Remove locked messages; returns the tokens whose lock was lost."""
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            return locks.complete_held(db, ent, Queue.of(address.sub_queue), lock_tokens, self._now())

    def abandon(
        self, address: Address, lock_tokens: Sequence[str], properties: dict[str, Any] | None = None
    ) -> list[str]:
        """Release locks: the message is available again, or dead-lettered past MaxDeliveryCount,
        or (past its expiry) expired."""
        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            held, lost = locks.held(db, ent, Queue.of(address.sub_queue), lock_tokens, now)
            if properties:
                locks.modify(db, [r.id for r in held], properties)
            locks.release(db, self._router, ent, held, now)
            return lost

    def release(self, address: Address, lock_tokens: Sequence[str]) -> list[str]:
        """Give back messages delivered but never handed to the application (AMQP `released`).

        As on Service Bus, a release is not a delivery attempt: the lock goes and the delivery
        count taken when it was locked is returned. A message released MaxDeliveryCount times
        is poison all the same: from then on a release counts as an abandon.
        """
        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            held, lost = locks.held(db, ent, Queue.of(address.sub_queue), lock_tokens, now)
            locks.release_unprocessed(db, self._router, ent, held, now)
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
            raise AlreadyDeadLettered()
        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            held, lost = locks.held(db, ent, Queue.MAIN, lock_tokens, now)
            ids = [r.id for r in held]
            if properties:
                locks.modify(db, ids, properties)
            self._router.dead_letter_ids(db, ent, ids, DeadLetterCause(reason, description), now)
            return lost

    def defer(
        self, address: Address, lock_tokens: Sequence[str], properties: dict[str, Any] | None = None
    ) -> list[str]:
        """Set messages aside: only receive_deferred by sequence number returns them."""
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            held, lost = locks.held(db, ent, Queue.of(address.sub_queue), lock_tokens, self._now())
            ids = [r.id for r in held]
            if properties:
                locks.modify(db, ids, properties)
            locks.defer(db, ids)
            return lost

    def still_locked(self, address: Address, lock_tokens: Sequence[str]) -> set[str]:
        """The tokens whose lock is still held (nothing changes)."""
        now = self._now()
        with self.store.read() as db:
            ent = entities.queue_entity(db, address)
            held, _lost = locks.held(db, ent, Queue.of(address.sub_queue), lock_tokens, now)
            return {r.lock_token for r in held}

    def renew_locks(self, address: Address, lock_tokens: Sequence[str]) -> dict[str, datetime]:
        """Extend locks by the lock duration; lost tokens are absent from the result."""
        now = self._now()
        with self.store.write() as db:
            ent = entities.queue_entity(db, address)
            held, _lost = locks.held(db, ent, Queue.of(address.sub_queue), lock_tokens, now)
            until = now + ent.lock_duration_ms
            locks.renew(db, [r.id for r in held], until)
            return {r.lock_token: stamp(until) for r in held}
