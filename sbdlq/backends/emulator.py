"""The Backend over the local emulator engine.

SBDLQ_EMULATOR_LATENCY adds a wait to every broker round trip, so a command shows here
how it would behave against a namespace far away (the benchmarks rely on it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.errors import EntityNotFound, OperationFailed
from sbdlq.loopless import pause
from sbdlq.models import Counts
from sbdlq.timeparse import from_epoch_ms

if TYPE_CHECKING:
    from sbdlq.emulator.admin import EmulatorAdmin
    from sbdlq.entity_info import EntityInfo, SubscriptionRule, SubscriptionRules
    from sbdlq.messages import Message
    from sbdlq.outbound import Choose, MovedBatch, OutboundMessage


class EmulatorBackend(Backend):
    """Broker primitives served by the embedded engine."""

    name = "emulator"

    def __init__(
        self,
        path: str,
        *,
        latency_s: float = 0.0,
        clock: Callable[[], float] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        # timeout_s (--timeout): how long a write waits for another process holding the store.
        self.engine = Engine(path, clock=clock, busy_timeout_s=timeout_s)
        self.latency_s = latency_s
        # SBDLQ_EMULATOR_LATENCY stands in for a far namespace, so with it the emulator behaves
        # like one: each call a round trip, and a move a send and then a complete.
        self.answers_at_once = not latency_s
        self.moves_atomically = not latency_s  # one store transaction (see send_and_complete)
        self.description = f"emulator store {path}" + (f" with {latency_s * 1000:.0f} ms latency" if latency_s else "")

    def admin(self) -> EmulatorAdmin:
        """The store's admin operations (`sbdlq emulator ...`), on this backend's engine."""
        from sbdlq.emulator.admin import EmulatorAdmin  # the emulator commands' only: not on count's path

        return EmulatorAdmin(self.engine)

    async def _round_trip(self) -> None:
        # Always yield: a caller's loop of calls must let other tasks (lock renewal) run.
        if self.latency_s:
            import asyncio

            await asyncio.sleep(self.latency_s)
        else:
            await pause()

    async def list_entities(self) -> list[EntityInfo]:
        await self._round_trip()
        return self.engine.list_entities()

    async def get_entity(self, entity: EntityPath) -> EntityInfo:
        await self._round_trip()
        return self.engine.get_entity(entity)

    async def subscription_rules(self, topic: EntityPath) -> list[SubscriptionRules]:
        from sbdlq.entity_info import SubscriptionRule, SubscriptionRules  # here: `count` reads no rule

        await self._round_trip()
        engine = self.engine
        if engine.get_entity(topic).kind != "topic":
            raise EntityNotFound(f"topic {topic} not found")
        prefix = f"{topic}/Subscriptions/".lower()
        return [
            SubscriptionRules(
                subscription=e.path.rsplit("/", 1)[-1],
                status=e.status,
                rules=tuple(
                    SubscriptionRule(
                        r.name, r.sql, r.correlation, r.action, r.parameters, r.action_parameters, r.constant
                    )
                    for r in engine.rules(e.path)
                ),
                forward_to=e.forward_to,
            )
            for e in engine.list_entities()
            if e.kind == "subscription" and e.path.lower().startswith(prefix)
        ]

    async def subscription_names(self, topic: EntityPath) -> list[str]:
        await self._round_trip()
        return self.engine.subscription_names(topic)

    async def rules_of(self, subscription: EntityPath) -> tuple[SubscriptionRule, ...]:
        from sbdlq.entity_info import SubscriptionRule  # here: `count` reads no rule

        await self._round_trip()
        return tuple(
            SubscriptionRule(r.name, r.sql, r.correlation, r.action, r.parameters, r.action_parameters, r.constant)
            for r in self.engine.rules(subscription)
        )

    async def create_rule(self, subscription: EntityPath, rule: SubscriptionRule) -> None:
        await self._round_trip()
        self.engine.add_rule(subscription, _engine_rule(rule))

    async def update_rule(
        self, subscription: EntityPath, rule: SubscriptionRule, *, expected: SubscriptionRule | None = None
    ) -> None:
        await self._round_trip()
        # The compare is the engine's, inside the write transaction.
        held = _engine_rule(expected) if expected is not None else None
        self.engine.add_rule(subscription, _engine_rule(rule), replace=True, expected=held)

    async def delete_rule(
        self, subscription: EntityPath, name: str, *, expected: SubscriptionRule | None = None
    ) -> None:
        await self._round_trip()
        self.engine.remove_rule(subscription, name, expected=_engine_rule(expected) if expected is not None else None)

    async def counts(self, entity: EntityPath) -> Counts:
        await self._round_trip()
        return self.engine.counts(entity)

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        await self._round_trip()
        return self.engine.peek(address, from_sequence, max_count)

    async def _receive(self, address: Address, max_count: int, mode: ReceiveMode, max_wait_s: float) -> list[Message]:
        await self._round_trip()
        return self.engine.receive(address, max_count, mode=mode)

    async def discard(self, address: Address, max_count: int) -> int:
        await self._round_trip()
        return self.engine.discard(address, max_count)

    async def delete_messages(self, address: Address, max_count: int, *, before: datetime | None = None) -> int | None:
        """With SBDLQ_EMULATOR_LATENCY, a namespace's batch delete (Standard's 500 a request);
        the local store has none, as its receive-and-delete costs no round trip."""
        if not self.latency_s:
            return None
        await self._round_trip()
        # No cutoff: any message, as a client's (.NET's DateTime.MaxValue), not the clock's now.
        cutoff = before if before is not None else _NO_CUTOFF
        return self.engine.delete_messages(address, min(max_count, self.delete_request_max), before=cutoff)

    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        await self._round_trip()
        return _lost(messages, self.engine.complete(address, _tokens(messages)))

    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        await self._round_trip()
        return _lost(messages, self.engine.abandon(address, _tokens(messages)))

    async def release(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Unlike abandon, the delivery count taken when they were locked is returned."""
        await self._round_trip()
        return _lost(messages, self.engine.release(address, _tokens(messages)))

    async def dead_letter(
        self, address: Address, messages: Sequence[Message], reason: str | None, description: str | None
    ) -> list[Message]:
        # None: no reason at all, as a consumer that dead-letters without one leaves it.
        await self._round_trip()
        return _lost(messages, self.engine.dead_letter(address, _tokens(messages), reason, description))

    async def defer(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Set messages aside (only a receive by sequence number returns them); the ones whose lock was lost."""
        await self._round_trip()
        return _lost(messages, self.engine.defer(address, _tokens(messages)))

    async def still_held(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Those still locked by their token (no round trip: a local read)."""
        tokens = [m.lock_token for m in messages if m.lock_token is not None]
        locked = self.engine.still_locked(address, tokens) if tokens else set()
        return [m for m in messages if m.lock_token in locked]

    async def renew_locks(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        await self._round_trip()
        renewed = self.engine.renew_locks(address, _tokens(messages))
        lost = []
        for m in messages:
            if m.lock_token in renewed:
                m.locked_until = renewed[m.lock_token]
            else:
                lost.append(m)
        return lost

    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        await self._round_trip()
        self.engine.send(entity, messages)

    async def schedule(
        self, entity: EntityPath, messages: Sequence[OutboundMessage], times: Sequence[datetime]
    ) -> list[int]:
        await self._round_trip()
        if len(messages) != len(times):
            raise ValueError("one time per message")
        timed = [replace(m, scheduled_enqueue_time=t) for m, t in zip(messages, times, strict=True)]
        numbers = self.engine.send(entity, timed)
        if len(numbers) != len(timed):
            # Duplicate detection dropped some, and which cannot be told: say so, never guess.
            raise OperationFailed(
                f"{entity} dropped {len(timed) - len(numbers)} of {len(timed)} scheduled message(s) as duplicates"
            )
        return numbers

    async def cancel_scheduled(self, entity: EntityPath, sequence_numbers: Sequence[int]) -> None:
        await self._round_trip()
        self.engine.cancel_scheduled(entity, sequence_numbers)

    def now(self) -> datetime:
        """The engine's clock (SBDLQ_EMULATOR_CLOCK_SKEW, a test's clock)."""
        value = from_epoch_ms(int(self.engine.clock() * 1000))
        assert value is not None
        return value

    async def send_and_complete(
        self, target: EntityPath, copies: Sequence[OutboundMessage], source: Address, originals: Sequence[Message]
    ) -> list[Message]:
        """The copies sent and the originals completed in one store transaction."""
        await self._round_trip()
        tokens = [m.lock_token for m in originals]
        if None not in tokens:
            return _lost(originals, self.engine.send_and_complete(target, copies, source, tokens))  # type: ignore[arg-type]
        # An original without a lock cannot be completed: neither is its copy sent.
        unlocked = [m for m in originals if m.lock_token is None]
        pairs = [(c, m.lock_token) for c, m in zip(copies, originals, strict=True) if m.lock_token is not None]
        lost = self.engine.send_and_complete(target, [c for c, _ in pairs], source, [t for _, t in pairs])
        return unlocked + _lost(originals, lost)

    async def move_available(
        self,
        source: Address,
        target: EntityPath,
        *,
        after_sequence: int,
        max_count: int,
        choose: Choose,
    ) -> MovedBatch | None:
        if not self.moves_atomically:
            return None  # standing in for a namespace: moves go under lock there
        await self._round_trip()
        return self.engine.move_available(
            source, target, after_sequence=after_sequence, max_count=max_count, choose=choose
        )

    async def close(self) -> None:
        self.engine.close()


_NO_CUTOFF = datetime(9999, 12, 31, tzinfo=UTC)


def _tokens(messages: Sequence[Message]) -> list[str]:
    return [m.lock_token for m in messages if m.lock_token is not None]


def _lost(messages: Sequence[Message], lost_tokens: list[str]) -> list[Message]:
    if not lost_tokens:
        return []
    lost = set(lost_tokens)
    return [m for m in messages if m.lock_token in lost]


def _engine_rule(rule: SubscriptionRule) -> Rule:
    return Rule(
        name=rule.name,
        sql=rule.sql,
        correlation=rule.correlation,
        action=rule.action,
        parameters=rule.parameters,
        action_parameters=rule.action_parameters,
        constant=rule.constant,
    )
