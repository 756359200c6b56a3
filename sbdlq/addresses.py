"""Entity names and sub-queue paths (DESIGN §3)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from sbdlq.errors import BadInput

DLQ_SUFFIX = "$DeadLetterQueue"
TRANSFER_DLQ_SUFFIX = "$Transfer/$DeadLetterQueue"

# Service Bus: letters, digits, periods, hyphens, underscores and slashes; start and end
# with a letter or digit; at most 260 characters (50 for a subscription name).
_NAME = re.compile(r"^[A-Za-z0-9](?:[\w.\-/]*[A-Za-z0-9])?$")
_SUB_NAME = re.compile(r"^[A-Za-z0-9](?:[\w.\-]*[A-Za-z0-9])?$")


class SubQueue(Enum):
    """Which queue of an entity: its main queue, its DLQ or its transfer DLQ."""

    NONE = "active"
    DEAD_LETTER = "deadletter"
    TRANSFER_DEAD_LETTER = "transferdeadletter"


@dataclass(frozen=True, slots=True)
class EntityPath:
    """A queue (`orders`) or a subscription (`topic`, `sub`); topics have no sub-queues."""

    name: str
    subscription: str | None = None

    @property
    def is_subscription(self) -> bool:
        return self.subscription is not None

    def __str__(self) -> str:
        if self.subscription is None:
            return self.name
        return f"{self.name}/Subscriptions/{self.subscription}"

    def sub_queue_path(self, sub_queue: SubQueue) -> str:
        """The broker path of one of this entity's queues."""
        if sub_queue is SubQueue.DEAD_LETTER:
            return f"{self}/{DLQ_SUFFIX}"
        if sub_queue is SubQueue.TRANSFER_DEAD_LETTER:
            return f"{self}/{TRANSFER_DLQ_SUFFIX}"
        return str(self)


@dataclass(frozen=True, slots=True)
class Address:
    """One queue of an entity: what a receiver or a peek reads."""

    entity: EntityPath
    sub_queue: SubQueue = SubQueue.NONE

    def __str__(self) -> str:
        return self.entity.sub_queue_path(self.sub_queue)


def validate_name(name: str, *, what: str = "entity") -> str:
    if not name or len(name) > 260 or not _NAME.match(name) or "//" in name:
        raise BadInput(
            f"invalid {what} name {name!r}",
            hint="use letters, digits, '.', '-', '_' and '/', starting and ending with a letter or digit",
        )
    return name


def parse_address(text: str) -> Address:
    """Parse `queue`, `topic/Subscriptions/sub`, with an optional DLQ suffix.

    Accepts the `amqps://host/` prefix that AMQP link addresses carry.
    """
    raw = text.strip()
    m = re.match(r"^(?:amqps?|sb)://[^/]+/(.*)$", raw, re.IGNORECASE)
    if m:
        raw = m.group(1)
    raw = raw.strip("/")
    sub_queue = SubQueue.NONE
    lowered = raw.lower()
    if lowered.endswith("/" + TRANSFER_DLQ_SUFFIX.lower()):
        raw = raw[: -len(TRANSFER_DLQ_SUFFIX) - 1]
        sub_queue = SubQueue.TRANSFER_DEAD_LETTER
    elif lowered.endswith("/" + DLQ_SUFFIX.lower()):
        raw = raw[: -len(DLQ_SUFFIX) - 1]
        sub_queue = SubQueue.DEAD_LETTER
    parts = raw.split("/")
    lowered_parts = [p.lower() for p in parts]
    if "subscriptions" in lowered_parts:
        i = lowered_parts.index("subscriptions")
        topic = "/".join(parts[:i])
        sub = "/".join(parts[i + 1 :])
        validate_name(topic, what="topic")
        if not sub or len(sub) > 50 or not _SUB_NAME.match(sub):
            raise BadInput(f"invalid subscription name {sub!r} in {text!r}")
        return Address(EntityPath(topic, sub), sub_queue)
    if "$" in raw:
        raise BadInput(
            f"invalid entity path {text!r}", hint="sub-queues are $DeadLetterQueue or $Transfer/$DeadLetterQueue"
        )
    validate_name(raw)
    return Address(EntityPath(raw), sub_queue)


def parse_entity(text: str) -> EntityPath:
    """An ENTITY argument: the sub-queue suffix is accepted and ignored."""
    return parse_address(text).entity


def send_target(to: str) -> EntityPath:
    """The queue or topic `--to` names: not a sub-queue, not a subscription (resubmit, replay, apply)."""
    target = parse_address(to)
    if target.sub_queue is not SubQueue.NONE:
        raise BadInput(f"--to {to!r}: cannot send to a dead-letter queue")
    if target.entity.is_subscription:
        raise BadInput(f"--to {to!r}: cannot send to a subscription; name its topic")
    return target.entity


def resubmit_target(address: Address, to: str | None) -> EntityPath:
    """Where a resubmit of `address` sends: `--to`, else the entity itself (a subscription's topic)."""
    if to is not None:
        return send_target(to)
    if address.entity.is_subscription:
        # A subscription's messages go back through its topic.
        return EntityPath(address.entity.name)
    return address.entity
