"""Seeding and inspecting a store through its engine: one set of shorthands for every suite."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sbdlq.addresses import Address, EntityPath, SubQueue, parse_address, parse_entity
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.models import Counts, Message, OutboundMessage


def ids(messages: Sequence[Any]) -> list[str]:
    """The message ids, in order ("" for a message without one)."""
    return [m.message_id or "" for m in messages]


def msgs(n: int, prefix: str = "m", start: int = 0, **fields: Any) -> list[OutboundMessage]:
    """n outbound messages with ids and bodies `<prefix><i>`."""
    return [
        OutboundMessage(body=f"{prefix}{i}".encode(), message_id=f"{prefix}{i}", **fields)
        for i in range(start, start + n)
    ]


class Seeder:
    """Sets up entities and messages through an engine of the store under test, and looks inside."""

    def __init__(self, engine: Engine, path: Path | None = None) -> None:
        self.engine = engine
        self.path = path

    @property
    def clock(self) -> Any:
        """The engine's clock (a support.Clock where the test controls time)."""
        return self.engine.clock

    msgs = staticmethod(msgs)

    @staticmethod
    def ids(messages: Sequence[Any]) -> list[str]:
        """The message ids, in order."""
        return ids(messages)

    # ------------------------------------------------------------ set up

    def queue(self, name: str = "q", **props: Any) -> EntityPath:
        """A queue (properties as Engine.create_queue takes them)."""
        self.engine.create_queue(name, **props)
        return EntityPath(name)

    def topic(self, name: str = "t", *subscriptions: str, rules: list[Rule] | None = None, **props: Any) -> EntityPath:
        """A topic with subscriptions that each take everything (or the given rules)."""
        self.engine.create_topic(name)
        for sub in subscriptions:
            self.engine.create_subscription(name, sub, rules=rules, **props)
        return EntityPath(name)

    def send(self, entity: str, messages: Sequence[OutboundMessage]) -> list[int]:
        """Send through the engine."""
        return self.engine.send(entity, messages)

    def dead_letter(
        self,
        entity: str,
        n: int | Sequence[OutboundMessage] = 1,
        reason: str = "Bad",
        description: str = "it broke",
        *,
        prefix: str = "m",
        start: int = 0,
        messages: Sequence[OutboundMessage] | None = None,
        **fields: Any,
    ) -> list[Message]:
        """Send messages to a queue (or a subscription's topic), receive and dead-letter them.

        `n` is a count or the messages themselves. The entity's main queue should hold
        nothing else; returns the new DLQ messages.
        """
        if messages is None:
            messages = msgs(n, prefix, start, **fields) if isinstance(n, int) else n
        out = list(messages)
        path = parse_entity(entity)
        self.send(path.name, out)
        main = Address(path)
        got = self.engine.receive(main, len(out))
        assert len(got) == len(out), "seeding expects an otherwise empty main queue"
        assert self.engine.dead_letter(main, [m.lock_token for m in got if m.lock_token], reason, description) == []
        wanted = {m.message_id for m in out}
        return [m for m in self.dlq(entity) if m.message_id in wanted]

    def transfer_dead_letter(self, name: str, n: int = 1, prefix: str = "x") -> EntityPath:
        """A queue forwarding to a missing entity, so n messages land in its transfer DLQ."""
        self.queue(name, forward_to="nowhere")
        self.send(name, msgs(n, prefix))
        return EntityPath(name)

    # ------------------------------------------------------------ look inside

    def dlq(self, entity: str = "q", sub_queue: SubQueue = SubQueue.DEAD_LETTER) -> list[Message]:
        """Everything in the DLQ, peeked through the engine."""
        return self.engine.peek(Address(parse_address(entity).entity, sub_queue), 0, 100_000)

    def active(self, entity: str) -> list[Message]:
        """Everything in the main queue (or the given address), peeked through the engine."""
        return self.engine.peek(parse_address(entity), 0, 100_000)

    def counts(self, entity: str) -> Counts:
        return self.engine.counts(entity)

    def dlq_ids(self, entity: str = "q") -> list[str | None]:
        return [m.message_id for m in self.dlq(entity)]

    def peek_ids(self, address: str, n: int = 1000) -> list[str]:
        """Message ids a peek of the whole queue shows."""
        return ids(self.engine.peek(parse_address(address), 0, n))

    def snapshot(self, entity: str = "q") -> Any:
        """Counts, and sequence number, id and delivery count of each DLQ message."""
        return self.engine.counts(entity), [
            (m.sequence_number, m.message_id, m.delivery_count) for m in self.dlq(entity)
        ]

    def drain(self, address: str, batch: int = 100) -> list[Message]:
        """Receive-and-complete everything available now."""
        out: list[Message] = []
        a = parse_address(address)
        while True:
            got = self.engine.receive(a, batch)
            if not got:
                return out
            assert self.engine.complete(a, [m.lock_token for m in got if m.lock_token]) == []
            out.extend(got)

    def available(self, entity: str = "q") -> list[str]:
        """Receive every DLQ message at once (none may still be locked), then let them go."""
        a = Address(parse_address(entity).entity, SubQueue.DEAD_LETTER)
        got = self.engine.receive(a, 100_000)
        self.engine.abandon(a, [m.lock_token for m in got if m.lock_token])
        return sorted(m.message_id for m in got if m.message_id)


def dead_letter_all(
    engine: Engine, entity: str, messages: Sequence[OutboundMessage], reason: str, description: str
) -> None:
    """Send `messages` to a queue, then receive them all and dead-letter them with one reason."""
    engine.send(entity, messages)
    address = parse_address(entity)
    got = engine.receive(address, len(messages))
    engine.dead_letter(address, [m.lock_token for m in got if m.lock_token], reason, description)


def dead_lettered_store(
    path: Path, n: int, reason: str, description: str = "test", *, queues: Sequence[str] = ("orders", "retry")
) -> Path:
    """A store whose first queue has n messages `m-<i>` (body b"x") in its DLQ, and the other queues empty."""
    with Engine(path) as engine:
        for name in queues:
            engine.create_queue(name)
        dead_letter_all(
            engine, queues[0], [OutboundMessage(body=b"x", message_id=f"m-{i}") for i in range(n)], reason, description
        )
    return path


def stored_ids(store: Path, path: str, *, clock: Callable[[], float] | None = None) -> list[str]:
    """Every message id at an address of a store file, in order, peeked page by page (`clock`: the broker's)."""
    engine = Engine(store, clock=clock)
    out: list[str] = []
    start = 0
    try:
        while page := engine.peek(parse_address(path), start, 1000):
            out += [m.message_id or "" for m in page]
            start = page[-1].sequence_number + 1
    finally:
        engine.close()
    return out
