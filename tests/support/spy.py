"""A Backend wrapper for the contract tests: records calls, and lets a test slow down or break a primitive."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.models import Counts, EntityInfo, Message, OutboundMessage


class Spy(Backend):
    """Wraps a backend: records calls, and lets a test slow down or break a primitive."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[str] = []
        self.before_send: Callable[[EntityPath, Sequence[OutboundMessage]], Awaitable[None]] | None = None
        self.after_send: Callable[[EntityPath, Sequence[OutboundMessage]], Awaitable[None]] | None = None
        self.sent: list[OutboundMessage] = []
        # Messages between the start of their send and the end of their complete.
        self.in_flight = 0
        self.max_in_flight = 0
        self.renewed: list[str] = []
        self.completed: list[int] = []

    async def list_entities(self) -> list[EntityInfo]:
        self.calls.append("list_entities")
        return await self.inner.list_entities()

    async def get_entity(self, entity: EntityPath) -> EntityInfo:
        self.calls.append("get_entity")
        return await self.inner.get_entity(entity)

    async def counts(self, entity: EntityPath) -> Counts:
        self.calls.append("counts")
        return await self.inner.counts(entity)

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        self.calls.append("peek")
        return await self.inner.peek(address, from_sequence, max_count)

    async def _receive(self, address: Address, max_count: int, mode: ReceiveMode, max_wait_s: float) -> list[Message]:
        self.calls.append("receive")
        return await self.inner.receive(address, max_count, mode=mode, max_wait_s=max_wait_s)

    async def discard(self, address: Address, max_count: int) -> int:
        self.calls.append("discard")
        return await self.inner.discard(address, max_count)

    async def delete_messages(self, address: Address, max_count: int, *, before: datetime | None = None) -> int | None:
        self.calls.append("delete_messages")
        return await self.inner.delete_messages(address, max_count, before=before)

    async def still_held(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        # A local check, not a broker call: not recorded.
        return await self.inner.still_held(address, messages)

    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        self.calls.append("complete")
        try:
            lost = await self.inner.complete(address, messages)
        finally:
            if address.sub_queue is not SubQueue.NONE:
                self.in_flight -= len(messages)
        self.completed += [m.sequence_number for m in messages if m not in lost]
        return lost

    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        self.calls.append("abandon")
        return await self.inner.abandon(address, messages)

    async def dead_letter(
        self, address: Address, messages: Sequence[Message], reason: str, description: str
    ) -> list[Message]:
        self.calls.append("dead_letter")
        return await self.inner.dead_letter(address, messages, reason, description)

    async def renew_locks(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        self.calls.append("renew_locks")
        self.renewed += [m.lock_token for m in messages if m.lock_token]
        return await self.inner.renew_locks(address, messages)

    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        self.calls.append("send")
        self.in_flight += len(messages)
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        ok = False
        try:
            if self.before_send:
                await self.before_send(entity, messages)
            await self.inner.send(entity, messages)
            ok = True
        finally:
            if not ok:
                self.in_flight -= len(messages)
        self.sent += messages
        if self.after_send:
            await self.after_send(entity, messages)

    async def close(self) -> None:
        await self.inner.close()
