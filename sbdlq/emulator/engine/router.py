"""Routing: topic fan-out through subscription rules, auto-forwarding, and dead-lettering
(with ForwardDeadLetteredMessagesTo) of messages arriving or already stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from sbdlq.models import OutboundMessage
from sbdlq.sqlfilter.subscription import RuleError

from .entities import find_entity, main_queue_size, subscriptions
from .errors import EntityFull, EntityIsDisabled, EntityMissing
from .inserts import dedup, insert, insert_outbound, number, over_header_limit
from .rows import chunks, marks, message_rows, to_draft
from .rules import RuleBook, apply_rules
from .vocabulary import (
    HEADER_TOO_LARGE,
    MAX_HOPS,
    NO_SESSION,
    TOO_MANY_HOPS,
    DeadLetterCause,
    Draft,
    Entity,
    EntityKind,
    Queue,
    State,
)


def _due(d: Draft, now: int) -> bool:
    return d.scheduled_ms is None or d.scheduled_ms <= now


class Router:
    """Moves messages between entities; holds what outlives one call (compiled rules,
    when each entity's duplicate-detection history was last trimmed)."""

    def __init__(self) -> None:
        self.rule_book = RuleBook()
        self.dedup_pruned: dict[int, int] = {}

    def send_plain(
        self, db: sqlite3.Connection, ent: Entity, messages: Sequence[OutboundMessage], now: int
    ) -> list[int]:
        """A queue with no forwarding or duplicate detection: rows straight from the messages."""
        seqs, oversized = insert_outbound(db, ent, messages, now)
        self.dead_letter(db, ent, oversized, HEADER_TOO_LARGE, now)
        return seqs

    def deliver(self, db: sqlite3.Connection, ent: Entity, drafts: list[Draft], now: int) -> list[int]:
        """Route drafts into an entity: topics fan out, forwarding follows, rules apply."""
        if not drafts:
            return []
        if ent.kind == EntityKind.TOPIC:
            return self.fan_out(db, ent, drafts, now)
        if ent.requires_dup:
            drafts = dedup(db, ent, drafts, now, self.dedup_pruned)
        number(db, ent, drafts)
        result = [d.seq for d in drafts if d.seq is not None]
        landing: list[Draft] = []
        no_session: list[Draft] = []
        oversized: list[Draft] = []
        session_check = ent.kind == EntityKind.SUBSCRIPTION and ent.requires_session
        for d in drafts:
            if session_check and d.session_id is None:
                no_session.append(d)
            elif over_header_limit(d.header_fields(), d.props):
                oversized.append(d)
            else:
                landing.append(d)
        if ent.forward_to and landing:
            # Scheduled messages wait here and are forwarded when they fall due.
            immediate = [d for d in landing if _due(d, now)]
            landing = [d for d in landing if not _due(d, now)]
            self.forward(db, ent, ent.forward_to, immediate, now)
        insert(db, ent, Queue.MAIN, landing, now)
        self.dead_letter(db, ent, no_session, NO_SESSION, now)
        self.dead_letter(db, ent, oversized, HEADER_TOO_LARGE, now)
        return result

    def fan_out(
        self, db: sqlite3.Connection, topic: Entity, drafts: list[Draft], now: int, *, fresh: bool = True
    ) -> list[int]:
        """Copy topic messages into every subscription whose rules take them."""
        if topic.requires_dup and fresh:
            drafts = dedup(db, topic, drafts, now, self.dedup_pruned)
        number(db, topic, drafts)
        result = [d.seq for d in drafts if d.seq is not None]
        due = [d for d in drafts if _due(d, now)]
        if len(due) < len(drafts):
            # Scheduled topic messages wait in the topic and fan out when they fall due.
            insert(db, topic, Queue.MAIN, [d for d in drafts if not _due(d, now)], now)
        if not due:
            return result
        for sub in subscriptions(db, topic):
            if sub.status != "Active":
                continue
            accepted: list[Draft] = []
            failed: dict[DeadLetterCause, list[Draft]] = {}
            rules = self.rule_book.rules(db, sub)
            for d in due:
                try:
                    copy = apply_rules(rules, d)
                except RuleError as err:
                    if sub.dl_on_filter_exc:
                        failed.setdefault(DeadLetterCause(err.type_name, err.message), []).append(d.copy())
                    continue
                if copy is not None:
                    # The smaller of the topic's and the subscription's TTL applies.
                    ceiling = topic.default_ttl_ms
                    copy.ttl_ms = ceiling if copy.ttl_ms is None else min(copy.ttl_ms, ceiling)
                    accepted.append(copy)
            self.deliver(db, sub, accepted, now)
            for cause, failures in failed.items():
                self.dead_letter(db, sub, failures, cause, now)
        return result

    def forward(self, db: sqlite3.Connection, src: Entity, dest_path: str, drafts: list[Draft], now: int) -> None:
        """Auto-forward; too many hops, or a destination that can't take it: src's transfer DLQ."""
        if not drafts:
            return
        too_far = [d for d in drafts if d.hops + 1 > MAX_HOPS]
        going = [d for d in drafts if d.hops + 1 <= MAX_HOPS]
        self._transfer_dead_letter(db, src, too_far, TOO_MANY_HOPS, now)
        if not going:
            return
        dest = find_entity(db, dest_path)
        if dest is None:
            missing = DeadLetterCause("MessagingEntityNotFound", EntityMissing.text(dest_path))
            self._transfer_dead_letter(db, src, going, missing, now)
            return
        if dest.status != "Active":
            disabled = DeadLetterCause("MessagingEntityDisabled", EntityIsDisabled.text(dest.path))
            self._transfer_dead_letter(db, src, going, disabled, now)
            return
        if dest.kind == EntityKind.QUEUE and dest.max_size is not None:
            # As many as fit go; the rest stop here.
            room = max(0, dest.max_size - main_queue_size(db, dest))
            full = going[room:]
            going = going[:room]
            quota = DeadLetterCause("QuotaExceeded", EntityFull.text(dest.path, dest.max_size))
            self._transfer_dead_letter(db, src, full, quota, now)
        moved = [d.copy(hops=d.hops + 1, seq=None) for d in going]
        self.deliver(db, dest, moved, now)

    def _transfer_dead_letter(
        self, db: sqlite3.Connection, src: Entity, drafts: list[Draft], cause: DeadLetterCause, now: int
    ) -> None:
        if drafts:
            insert(db, src, Queue.TRANSFER_DEAD_LETTER, drafts, now, extra=cause.props())

    def dead_letter(
        self, db: sqlite3.Connection, ent: Entity, drafts: list[Draft], cause: DeadLetterCause, now: int
    ) -> None:
        """Dead-letter messages: into the entity's DLQ, or on per ForwardDeadLetteredMessagesTo."""
        if not drafts:
            return
        extra = cause.props()
        if ent.forward_dlq_to:
            moved = []
            for d in drafts:
                c = d.copy(dl_source=ent.path, scheduled_ms=None, enqueued_ms=None)
                c.props.update(extra)
                moved.append(c)
            self.forward(db, ent, ent.forward_dlq_to, moved, now)
            return
        insert(db, ent, Queue.DEAD_LETTER, drafts, now, extra=extra)

    def dead_letter_ids(
        self, db: sqlite3.Connection, ent: Entity, ids: list[int], cause: DeadLetterCause, now: int
    ) -> None:
        """Dead-letter stored main-queue rows by id (as `dead_letter`, but moved in place)."""
        if not ids:
            return
        if ent.forward_dlq_to:
            self.dead_letter(db, ent, take_rows(db, ids), cause, now)
            return
        # The reason and description are set inside SQLite (json_set), so moving thousands of
        # rows is one statement per chunk rather than a decode and encode per row.
        extra = cause.props()
        if extra:
            paths = ", ".join("?, ?" for _ in extra)
            props_sql = f"json_set(COALESCE(props, '{{}}'), {paths})"
            props_args: list[Any] = []
            for k, v in extra.items():
                props_args += [f'$."{k}"', v]
        else:
            props_sql, props_args = "props", []
        for chunk in chunks(ids):
            db.execute(
                f"UPDATE message SET queue = {Queue.DEAD_LETTER:d}, state = {State.ACTIVE:d}, lock_token = NULL, "
                f"locked_until_ms = NULL, props = {props_sql} WHERE id IN ({marks(chunk)})",
                (*props_args, *chunk),
            )


def take_rows(db: sqlite3.Connection, ids: list[int]) -> list[Draft]:
    """Remove stored rows, in sequence order within each chunk, as drafts."""
    drafts: list[Draft] = []
    for chunk in chunks(ids):
        in_list = marks(chunk)
        drafts.extend(map(to_draft, message_rows(db, f"id IN ({in_list}) ORDER BY seq", chunk)))
        db.execute(f"DELETE FROM message WHERE id IN ({in_list})", chunk)
    return drafts
