"""The Backend interface: the broker primitives every operation is built from.

A backend speaks to one namespace. Operations in `sbdlq.operations` are written once
against this interface; backends translate their own errors into `sbdlq.errors` here,
at the edge, so nothing above sees sqlite3 or azure exceptions.

Errors a backend may raise: EntityNotFound, AuthError, ServiceUnavailable (and its
TransientError), LockLost, InvalidOperation, BadInput, OperationFailed, SendUnconfirmed (send).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING

from sbdlq.addresses import Address, EntityPath
from sbdlq.errors import EntityNotFound, ServiceUnavailable
from sbdlq.models import Counts
from sbdlq.models import ReceiveMode as ReceiveMode  # re-exported: it moved to sbdlq.models

if TYPE_CHECKING:
    # Annotations only (here: `count` makes none of these, sbdlq.models loads them on first use).
    from sbdlq.entity_info import EntityInfo, SubscriptionRule, SubscriptionRules
    from sbdlq.messages import Message
    from sbdlq.outbound import Choose, MovedBatch, OutboundMessage

#: How long a not-found error may wait for the namespace's listing that names the nearest entities.
HINT_TIMEOUT_S = 5.0


class Backend(ABC):
    """Broker primitives for queues, subscriptions and their DLQs."""

    #: short name shown in --verbose ("emulator", "servicebus")
    name: str = "backend"
    #: how the backend reached the namespace, for --verbose
    description: str = ""
    #: answers come without a round trip to wait out (the in-process emulator, no added
    #: latency): there is nothing to overlap, so callers need not ask ahead
    answers_at_once: bool = False

    @property
    def sdk_fallbacks(self) -> list[str]:
        """The private SDK shortcuts given up so far (the Service Bus backend's; none elsewhere)."""
        return []

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if isinstance(exc, EntityNotFound) and exc.hint is None:
                exc.hint = await self._entity_hint(exc.message)
        finally:
            await self.close()

    async def _entity_hint(self, message: str) -> str | None:
        """`did you mean orders?` for a misspelt entity, from the namespace's listing (None when none is near)."""
        from sbdlq.nearest import entity_hint

        try:
            if self.answers_at_once:
                listing = await self.list_entities()
            else:
                import asyncio

                # A namespace's listing has no deadline of its own; a hint must not hold the error.
                listing = await asyncio.wait_for(self.list_entities(), HINT_TIMEOUT_S)
        except Exception:  # only a hint: the not-found error is what the operator gets either way
            return None
        return entity_hint(message, [info.path for info in listing])

    @abstractmethod
    async def list_entities(self) -> list[EntityInfo]:
        """Every queue, topic and subscription of the namespace."""

    @abstractmethod
    async def get_entity(self, entity: EntityPath) -> EntityInfo:
        """One queue, topic or subscription; EntityNotFound when missing."""

    async def subscription_rules(self, topic: EntityPath) -> list[SubscriptionRules]:
        """Every subscription of a topic with its status and rules (the routing check reads them).

        EntityNotFound for a missing topic; AuthError when the rules may not be read (no
        Manage right); ServiceUnavailable when nothing can serve them.
        """
        raise ServiceUnavailable(f"the {self.name} backend cannot read subscription rules")

    async def subscription_names(self, topic: EntityPath) -> list[str]:
        """The names of a topic's subscriptions (one admin call on a namespace; a targeted run
        asks before each chunk whether one appeared)."""
        return [s.subscription for s in await self.subscription_rules(topic)]

    async def rules_of(self, subscription: EntityPath) -> tuple[SubscriptionRule, ...]:
        """One subscription's rules (one admin call on a namespace); EntityNotFound when it is gone."""
        from sbdlq.errors import EntityNotFound

        wanted = (subscription.subscription or "").lower()
        for s in await self.subscription_rules(EntityPath(subscription.name)):
            if s.subscription.lower() == wanted:
                return s.rules
        raise EntityNotFound(f"subscription {subscription} not found")

    async def create_rule(self, subscription: EntityPath, rule: SubscriptionRule) -> None:
        """Add a rule to a subscription (an error when its name is taken); AuthError without Manage."""
        raise ServiceUnavailable(f"the {self.name} backend cannot change subscription rules")

    async def update_rule(
        self, subscription: EntityPath, rule: SubscriptionRule, *, expected: SubscriptionRule | None = None
    ) -> None:
        """Replace, in one step, the filter and action of the subscription's rule of that name.

        With `expected` (the rule as the caller read it), only while the held rule still equals
        it: RuleChanged otherwise, or when it is gone, and nothing is written.
        """
        raise ServiceUnavailable(f"the {self.name} backend cannot change subscription rules")

    async def delete_rule(
        self, subscription: EntityPath, name: str, *, expected: SubscriptionRule | None = None
    ) -> None:
        """Remove the subscription's rule of that name; EntityNotFound when there is none.

        With `expected`, only while the held rule still equals it (RuleChanged otherwise).
        """
        raise ServiceUnavailable(f"the {self.name} backend cannot change subscription rules")

    @abstractmethod
    async def counts(self, entity: EntityPath) -> Counts:
        """Active, dead-letter, transfer-dead-letter and scheduled counts of a queue or subscription."""

    @abstractmethod
    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        """Up to max_count messages with sequence number >= from_sequence, without locking."""

    async def receive(
        self,
        address: Address,
        max_count: int,
        *,
        mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
        max_wait_s: float = 1.0,
    ) -> list[Message]:
        """Up to max_count messages; an empty list when none arrive within max_wait_s."""
        # The public signature and its defaults are declared here once; backends implement _receive.
        if max_count <= 0:
            return []
        return await self._receive(address, max_count, mode, max_wait_s)

    @abstractmethod
    async def _receive(self, address: Address, max_count: int, mode: ReceiveMode, max_wait_s: float) -> list[Message]:
        """receive() with max_count >= 1 and every argument given."""

    async def discard(self, address: Address, max_count: int) -> int:
        """Receive-and-delete up to max_count messages without keeping them; how many went."""
        return len(await self.receive(address, max_count, mode=ReceiveMode.RECEIVE_AND_DELETE, max_wait_s=1.0))

    async def open_links(self, address: Address, mode: ReceiveMode, target: EntityPath | None = None) -> None:
        """Open the receiver of an address (and the sender of a target) before a run's first receive."""
        return None  # nothing to attach where receiving is a local call

    #: the most one delete_messages request takes (a broker's limit per request); a caller
    #: that bounds a run (--max) reserves this much for each request it has in flight
    delete_request_max: int = 500

    async def delete_messages(self, address: Address, max_count: int, *, before: datetime | None = None) -> int | None:
        """Delete up to max_count (at most `delete_request_max`) messages on the broker side,
        enqueued before `before`: how many went. Several may be in flight at once.

        None when the broker has no such operation; the caller then receives and deletes.
        """
        return None

    @abstractmethod
    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Settle as done (removes them); returns the messages it cannot say were completed:
        their lock was lost, or they went in one disposition that failed, when some of them may
        have gone all the same (settle_recovery.still_in tells which are left)."""

    @abstractmethod
    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Release the locks; returns the messages whose lock was already lost."""

    async def release(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Give back locked messages that were passed over, not handled; the ones whose lock was lost.

        Service Bus clients have no "release": by default this abandons, which adds 1 to the
        delivery count. A backend that can give a message back without counting a delivery does.
        """
        return await self.abandon(address, messages)

    @abstractmethod
    async def dead_letter(
        self, address: Address, messages: Sequence[Message], reason: str, description: str
    ) -> list[Message]:
        """Move to the DLQ; returns the messages whose lock was lost."""

    async def still_held(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Of locked messages, those whose lock this client can still settle (default: all; it cannot tell)."""
        return list(messages)

    @abstractmethod
    async def renew_locks(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Extend the locks (updates locked_until); returns the messages whose lock was lost."""

    @abstractmethod
    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        """Send to a queue or topic: all accepted; or SendUnconfirmed when some may have reached the
        broker (its `sent` first accepted, its next `unknown` without an answer: never to be sent
        again); or another error, and none was accepted (a TransientError may be retried)."""

    async def schedule(
        self, entity: EntityPath, messages: Sequence[OutboundMessage], times: Sequence[datetime]
    ) -> list[int]:
        """Schedule messages[i] on a queue or topic to become active at times[i] (aware, UTC);
        the sequence number the broker gave each, in order. All scheduled, or an error and none
        assumed scheduled, or (as send) SendUnconfirmed: the first `sent` scheduled (their
        `sequence_numbers`), the next `unknown` perhaps."""
        raise ServiceUnavailable(f"the {self.name} backend cannot schedule messages")

    async def cancel_scheduled(self, entity: EntityPath, sequence_numbers: Sequence[int]) -> None:
        """Cancel scheduled messages of a queue or topic by sequence number. MessageNotFound (as
        Service Bus answers) when a number is not a message still scheduled there (it became
        active, was cancelled, never was): then count on none of the call's being cancelled."""
        raise ServiceUnavailable(f"the {self.name} backend cannot cancel scheduled messages")

    def now(self) -> datetime:
        """The broker's time now (a schedule is read against it): the wall clock, but an emulator's own."""
        return datetime.now(UTC)

    #: Whether send_and_complete sends and completes in one transaction (the local emulator):
    #: then no message is ever between its copy's send and its own completion.
    moves_atomically: bool = False

    async def send_and_complete(
        self, target: EntityPath, copies: Sequence[OutboundMessage], source: Address, originals: Sequence[Message]
    ) -> list[Message]:
        """Send copies[i] of originals[i] to target, and complete the originals; the originals
        whose lock was lost.

        A backend that `moves_atomically` does both in one transaction: on an error neither
        happened (so the call may be retried), and the copy of an original whose lock was lost
        is not sent. By default: send, then complete; an error may come after the send, and the
        lost originals' copies were sent (operations call it only where it is atomic).
        """
        await self.send(target, copies)
        return await self.complete(source, originals)

    async def move_available(
        self,
        source: Address,
        target: EntityPath,
        *,
        after_sequence: int,
        max_count: int,
        choose: Choose,
    ) -> MovedBatch | None:
        """Read up to max_count available messages of a DLQ after `after_sequence`, without
        locking them, and move the ones `choose` pairs with a copy: copies sent to target,
        originals gone, in one transaction (on an error, or a kill, neither happened).

        None where moving without a lock is impossible (a namespace: there a move is a send
        under lock and then a complete); the caller then runs the locked loop.
        """
        return None

    @abstractmethod
    async def close(self) -> None:
        """Release connections and receivers."""
