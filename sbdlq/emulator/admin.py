"""The emulator store's admin operations: what `sbdlq emulator ...` does, as a typed library.

The CLI parses its options, calls one of these and renders the result, as the DLQ commands
do with `sbdlq.operations`. Everything here speaks to the engine through its public methods;
receive-and-settle goes through any consumer with the Backend's settle primitives, so the
emulator backend's `dead_letter` is what `emulator receive --dead-letter` calls.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from sbdlq.addresses import Address, EntityPath
from sbdlq.emulator.engine import Engine
from sbdlq.emulator.engine.vocabulary import GENEROUS, Quotas
from sbdlq.emulator.engine.vocabulary import MAX_LOCK_S as MAX_LOCK_S  # the CLI's --lock-duration check reads it
from sbdlq.errors import BadInput, OperationFailed
from sbdlq.models import COUNT_NAMES, Counts, EntityInfo, Message, OutboundMessage

if TYPE_CHECKING:
    from sbdlq.emulator.config_json import Applied, EmulatorConfig
    from sbdlq.emulator.demo import DemoSummary


@dataclass(frozen=True, slots=True)
class EntityRow:
    """One line of `emulator list`: a queue or subscription with its counts, or a topic (counts None)."""

    entity: str
    kind: str
    #: the entity's counts; None for a topic, which keeps no messages of its own
    counts: Counts | None
    subscriptions: int | None

    def to_json(self) -> dict[str, Any]:
        """The row as a dict, keys in column order: every count of `COUNT_NAMES` (None for a topic)."""
        counts = {name: None if self.counts is None else getattr(self.counts, name) for name in COUNT_NAMES}
        return {"entity": self.entity, "kind": self.kind, **counts, "subscriptions": self.subscriptions}


#: `emulator list`'s columns and JSON keys: the counts are `models.COUNT_NAMES`
LIST_COLUMNS: tuple[str, ...] = ("entity", "kind", *COUNT_NAMES, "subscriptions")


class Settle(Enum):
    """What receive-and-settle does with the messages it locked."""

    COMPLETE = "complete"
    ABANDON = "abandon"
    DEAD_LETTER = "dead-letter"
    DEFER = "defer"


class Consumer(Protocol):
    """The broker primitives receive-and-settle needs (the emulator Backend has them all)."""

    async def receive(self, address: Address, max_count: int) -> list[Message]: ...

    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]: ...

    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]: ...

    async def dead_letter(
        self, address: Address, messages: Sequence[Message], reason: str | None, description: str | None
    ) -> list[Message]: ...

    async def defer(self, address: Address, messages: Sequence[Message]) -> list[Message]: ...


class EmulatorAdmin:
    """Admin operations on one open emulator store."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def entity_count(self) -> int:
        """How many queues, topics and subscriptions the store holds."""
        return len(self._engine.list_entities())

    def apply_config(self, cfg: EmulatorConfig) -> list[Applied]:
        """Create or update the entities of a Config.json (messages kept), all or nothing."""
        from sbdlq.emulator.config_json import apply_config

        return apply_config(self._engine, cfg)

    def list_entities(self) -> list[EntityRow]:
        """Every entity with its message counts; a topic keeps none of its own, so its counts are None."""
        rows = []
        for e in self._engine.list_entities():
            if e.kind == "topic":
                rows.append(EntityRow(e.path, e.kind, None, e.subscription_count))
                continue
            c = self._engine.counts(e.path)
            rows.append(EntityRow(c.entity, e.kind, c, None))
        return rows

    def send(self, entity: EntityPath | str, message: OutboundMessage, *, count: int = 1) -> int:
        """Send count copies of message; how many the broker accepted (duplicate detection drops some)."""
        return len(self._engine.send(entity, copies(message, count)))

    def reset(self) -> int:
        """Delete every entity and message; how many entities went."""
        n = self.entity_count()
        self._engine.reset()
        return n

    def create_queue(self, name: str, **props: Any) -> EntityInfo:
        """A new queue; props as the engine takes them (lock_duration_s, max_delivery_count, ...)."""
        return self._engine.create_queue(name, **props)

    def create_topic(self, name: str, **props: Any) -> EntityInfo:
        """A new topic (no subscriptions: messages sent to it go nowhere until one exists)."""
        return self._engine.create_topic(name, **props)

    def create_subscription(self, entity: EntityPath, sql_filter: str | None = None) -> EntityInfo:
        """A new subscription taking every message, or those matching sql_filter (its $Default rule)."""
        from sbdlq.emulator.engine import Rule

        if entity.subscription is None:
            raise BadInput(f"{entity}: name a subscription as TOPIC/Subscriptions/SUB")
        rules = None if sql_filter is None else [Rule(name="$Default", sql=sql_filter)]
        return self._engine.create_subscription(entity.name, entity.subscription, rules=rules)

    def delete(self, entity: EntityPath) -> EntityInfo:
        """Delete a queue, topic (with its subscriptions) or subscription and its messages; what it was."""
        info = self._engine.get_entity(entity)
        self._engine.delete_entity(entity)
        return info

    def demo(self, messages: int | None = None) -> DemoSummary:
        """Fill the store with the demo namespace (demo entities that exist are recreated).

        With `messages`, the same entities and reason mix scaled to that many dead-lettered messages.
        """
        from sbdlq.emulator.demo import DEFAULT_MESSAGES, populate

        return populate(self._engine, DEFAULT_MESSAGES if messages is None else messages)


def copies(message: OutboundMessage, count: int) -> list[OutboundMessage]:
    """count copies of message; with a message id and count > 1 they are numbered ID-1 … ID-N."""
    numbered = count > 1 and message.message_id is not None
    return [
        replace(
            message,
            message_id=f"{message.message_id}-{i}" if numbered else message.message_id,
            application_properties=dict(message.application_properties),
        )
        for i in range(1, count + 1)
    ]


def quota_set(name: str) -> Quotas:
    """The quotas `serve --quotas NAME` names; BadInput naming the choices for another name."""
    from sbdlq.emulator.engine.vocabulary import QUOTA_SETS

    found = QUOTA_SETS.get(name.lower())
    if found is None:
        raise BadInput(f"unknown --quotas {name!r}: {' or '.join(QUOTA_SETS)}")
    return found


def apply_at_start(store: str, cfg: EmulatorConfig, quotas: Quotas = GENEROUS) -> list[Applied]:
    """Apply a Config.json to the store, creating it if missing (a bad file leaves none): what
    `serve --config` does before it listens, as Microsoft's emulator loads its Config.json."""
    from pathlib import Path

    from sbdlq.emulator.config_json import apply_config

    if not Path(store).exists():
        check_new_config(cfg)
    with Engine(store, quotas=quotas) as engine:
        return apply_config(engine, cfg)


def check_new_config(cfg: EmulatorConfig) -> None:
    """Check a Config.json on its own, before a new store is created for it (a bad file leaves none)."""
    from sbdlq.emulator.config_json import check_against

    check_against(cfg, [])


async def receive_and_settle(
    consumer: Consumer,
    address: Address,
    max_count: int,
    action: Settle,
    *,
    reason: str | None = None,
    description: str | None = None,
) -> list[Message]:
    """Receive up to max_count with a peek-lock and settle them all one way; OperationFailed on lost locks."""
    got = await consumer.receive(address, max_count)
    locked = [m for m in got if m.lock_token]
    if not locked:
        return got
    if action is Settle.COMPLETE:
        lost = await consumer.complete(address, locked)
    elif action is Settle.ABANDON:
        lost = await consumer.abandon(address, locked)
    elif action is Settle.DEFER:
        lost = await consumer.defer(address, locked)
    else:
        lost = await consumer.dead_letter(address, locked, reason, description)
    if lost:
        raise OperationFailed(f"{len(lost)} lock(s) lost before settling; those messages stay in {address}")
    return got


def entity_names(store: str, kinds: Collection[str]) -> list[str]:
    """Paths of the store's entities of these kinds (`queue`, `topic`, `subscription`), for completion."""
    with Engine(store) as engine:
        return [e.path for e in engine.list_entities() if e.kind in kinds]
