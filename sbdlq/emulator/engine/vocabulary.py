"""The engine's vocabulary: queue and state enums, broker limits, entities, rules and drafts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING, Any

from sbdlq.addresses import SubQueue
from sbdlq.models import DEAD_LETTER_DESCRIPTION, DEAD_LETTER_REASON, MAX_TTL_S
from sbdlq.sqlfilter.context import system_view
from sbdlq.timeparse import to_epoch_ms

from .errors import NotPositive

if TYPE_CHECKING:
    from sbdlq.outbound import OutboundMessage

MAX_HOPS = 4
#: the longest MessageId and SessionId Service Bus takes
MAX_ID_CHARS = 128
#: the longest lock Service Bus grants (PT5M)
MAX_LOCK_S = 300.0
HEADER_LIMIT = 64 * 1024
# 9999-12-31T23:59:59Z: the broker's DateTime.MaxValue, where "never expires" lands.
MAX_TIME_MS = 253402300799000
NEVER_MS = int(MAX_TTL_S * 1000)
CHUNK = 500  # bound on SQL variables per statement
# Maximum message size in KB: Standard's fixed 256 KB by default; Premium allows up to 100 MB.
DEFAULT_MAX_MESSAGE_KB = 256
MAX_MESSAGE_KB = 102400


@dataclass(frozen=True, slots=True)
class Quotas:
    """The namespace's quotas past the broker's own rules (None: no cap).

    GENEROUS is the default (what serve always did); MICROSOFT is the Microsoft emulator's
    documented quotas, so a setup tested under it fits in that emulator.
    """

    name: str = "generous"
    queues_and_topics: int | None = None
    subscriptions_per_topic: int | None = None
    message_kb: int | None = None  # the largest MaxMessageSizeInKilobytes, and the cap on sends
    entity_bytes: int | None = None  # what an entity's messages may hold in all
    ttl_s: float | None = None  # the longest DefaultMessageTimeToLive, and every message's TTL cap
    connections: int | None = None  # serve's --max-connections when not given


GENEROUS = Quotas()
MICROSOFT = Quotas(
    name="microsoft",
    queues_and_topics=50,
    subscriptions_per_topic=50,
    message_kb=256,
    entity_bytes=100 * 1024 * 1024,
    ttl_s=3600.0,
    connections=10,
)
#: The quota sets `emulator serve --quotas` takes, by name.
QUOTA_SETS = {q.name: q for q in (GENEROUS, MICROSOFT)}

#: A message's optional properties, session_id ... partition_key, in the store's column order.
OptionalProps = tuple[str | None, str | None, str | None, str | None, str | None, str | None, str | None, str | None]


class Queue(IntEnum):
    """Which of an entity's queues a message row is in (the store's `message.queue`)."""

    MAIN = 0
    DEAD_LETTER = 1
    TRANSFER_DEAD_LETTER = 2

    @staticmethod
    def of(sub_queue: SubQueue) -> Queue:
        """The queue an address's sub-queue names."""
        return _QUEUE_OF[sub_queue]


_QUEUE_OF = {
    SubQueue.NONE: Queue.MAIN,
    SubQueue.DEAD_LETTER: Queue.DEAD_LETTER,
    SubQueue.TRANSFER_DEAD_LETTER: Queue.TRANSFER_DEAD_LETTER,
}


class State(IntEnum):
    """A message row's state (the store's `message.state`)."""

    ACTIVE = 0
    DEFERRED = 1
    SCHEDULED = 2


# Plain int keys: the store hands back ints, and an int finds an int key fastest.
STATE_NAMES: dict[int, str] = {
    State.ACTIVE.value: "active",
    State.DEFERRED.value: "deferred",
    State.SCHEDULED.value: "scheduled",
}


class EntityKind(StrEnum):
    """The store's `entity.kind`."""

    QUEUE = "queue"
    TOPIC = "topic"
    SUBSCRIPTION = "subscription"


STATUSES = ("Active", "Disabled")

# Dead-letter reasons and descriptions, as the service writes them.
MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
TTL_REASON = "TTLExpiredException"
TTL_DESCRIPTION = "The message expired and was dead lettered."
SESSION_REASON = "Session id is null."
SESSION_DESCRIPTION = "Session enabled entity doesn't allow a message whose session identifier is null."
HEADER_REASON = "HeaderSizeExceeded"
HEADER_DESCRIPTION = "The size quota for this stream has been exceeded."
HOPS_REASON = "MaxTransferHopCountExceeded"
# Microsoft's table gives no description for this reason (DeadLetterErrorDescription is null).
HOPS_DESCRIPTION: str | None = None


def mdc_description(max_delivery_count: int) -> str:
    """The description of a MaxDeliveryCountExceeded dead-lettering."""
    return f"Message could not be consumed after {max_delivery_count} delivery attempts."


@dataclass(frozen=True, slots=True)
class DeadLetterCause:
    """Why a message is dead-lettered: the reason and description the broker adds to it."""

    reason: str | None
    description: str | None

    def props(self) -> dict[str, Any]:
        """The application properties the broker adds (None: left out)."""
        added: dict[str, Any] = {}
        if self.reason is not None:
            added[DEAD_LETTER_REASON] = self.reason
        if self.description is not None:
            added[DEAD_LETTER_DESCRIPTION] = self.description
        return added


EXPIRED = DeadLetterCause(TTL_REASON, TTL_DESCRIPTION)
NO_SESSION = DeadLetterCause(SESSION_REASON, SESSION_DESCRIPTION)
HEADER_TOO_LARGE = DeadLetterCause(HEADER_REASON, HEADER_DESCRIPTION)
TOO_MANY_HOPS = DeadLetterCause(HOPS_REASON, HOPS_DESCRIPTION)


def max_deliveries(max_delivery_count: int) -> DeadLetterCause:
    """MaxDeliveryCountExceeded, with the entity's count in its description."""
    return DeadLetterCause(MAX_DELIVERY_REASON, mdc_description(max_delivery_count))


#: The SQL texts of the service's TrueFilter and FalseFilter.
TRUE_SQL, FALSE_SQL = "1=1", "1=0"


@dataclass(slots=True)
class Rule:
    """A subscription rule: a SQL, true, false or correlation filter, and an optional SQL action.

    `constant` marks the service's TrueFilter (True) and FalseFilter (False), whose `sql` is
    1=1 and 1=0: they keep that type through the admin API, where a SqlFilter of the same
    text stays a SqlFilter. `parameters` and `action_parameters` give the `@name`s of the
    filter's and the action's SQL their values (names begin with `@`).
    """

    name: str
    sql: str | None = None
    correlation: dict[str, Any] | None = None
    action: str | None = None
    parameters: dict[str, Any] | None = None
    action_parameters: dict[str, Any] | None = None
    constant: bool | None = None

    @staticmethod
    def true(name: str = "$Default", action: str | None = None) -> Rule:
        """The service's TrueFilter: takes every message."""
        return Rule(name=name, sql=TRUE_SQL, action=action, constant=True)

    @staticmethod
    def false(name: str, action: str | None = None) -> Rule:
        """The service's FalseFilter: takes none."""
        return Rule(name=name, sql=FALSE_SQL, action=action, constant=False)


@dataclass(slots=True)
class Entity:
    """An entity row; the fields are the store's columns, in ENTITY_COLUMNS order."""

    id: int
    path: str
    kind: str
    topic_id: int | None
    lock_duration_ms: int
    max_delivery_count: int
    default_ttl_ms: int
    dl_on_expiration: bool
    dl_on_filter_exc: bool
    requires_session: bool
    requires_dup: bool
    dup_window_ms: int
    forward_to: str | None
    forward_dlq_to: str | None
    status: str
    max_size: int | None
    max_message_kb: int | None  # NULL: the default (DEFAULT_MAX_MESSAGE_KB)
    created_ms: int  # when it was created (a store older than schema 7: when it was migrated)
    updated_ms: int  # when its properties last changed
    accessed_ms: int  # when a message was last sent to it or received from it

    def __post_init__(self) -> None:
        # SQLite stores the flags as 0/1.
        self.dl_on_expiration = bool(self.dl_on_expiration)
        self.dl_on_filter_exc = bool(self.dl_on_filter_exc)
        self.requires_session = bool(self.requires_session)
        self.requires_dup = bool(self.requires_dup)

    @property
    def max_message_bytes(self) -> int:
        """The largest message the entity accepts, in bytes."""
        return (self.max_message_kb or DEFAULT_MAX_MESSAGE_KB) * 1024


ENTITY_COLUMNS = ", ".join(f.name for f in fields(Entity))


@dataclass(slots=True)
class Draft:
    """A message on its way into an entity: everything stored but the broker's bookkeeping."""

    body: bytes
    message_id: str | None = None
    session_id: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    content_type: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    to: str | None = None
    partition_key: str | None = None
    ttl_ms: int | None = None
    scheduled_ms: int | None = None
    props: dict[str, Any] = field(default_factory=dict)
    body_type: str = "data"
    hops: int = 0
    dl_source: str | None = None
    seq: int | None = None  # set when a topic assigned it
    enqueued_ms: int | None = None  # a materialised scheduled message: its scheduled time
    amqp: bytes | None = None  # OutboundMessage.amqp, carried along untouched

    def optional(self) -> OptionalProps:
        """The optional properties, in the store's column order (session_id ... partition_key)."""
        return (self.session_id, self.correlation_id, self.subject, self.content_type, self.reply_to,
                self.reply_to_session_id, self.to, self.partition_key)  # fmt: skip

    def header_fields(self) -> tuple[str | None, ...]:
        """The properties-section fields the header-size rule counts."""
        return (self.message_id, *self.optional())

    def copy(self, **changes: Any) -> Draft:
        """A copy with its own application properties (dataclasses.replace is slow on a hot path)."""
        d = Draft(self.body, self.message_id, *self.optional(), self.ttl_ms, self.scheduled_ms, dict(self.props),
                  self.body_type, self.hops, self.dl_source, self.seq, self.enqueued_ms, self.amqp)  # fmt: skip
        for k, v in changes.items():
            setattr(d, k, v)
        return d

    @staticmethod
    def of(m: OutboundMessage, message_id: str | None = None) -> Draft:
        """The draft of a message a producer sends (a fresh message id if it has none)."""
        ttl = None if m.time_to_live_s is None else ttl_ms(m.time_to_live_s)
        sched = None if m.scheduled_enqueue_time is None else to_epoch_ms(m.scheduled_enqueue_time)
        mid = m.message_id if m.message_id is not None else (message_id or new_message_id())
        return Draft(bytes(m.body), mid, *outbound_optional(m), ttl, sched, dict(m.application_properties),
                     m.body_type, amqp=m.amqp)  # fmt: skip

    def system(self) -> dict[str, Any]:
        """System properties by their SQL filter names."""
        return system_view(self.message_id, *self.optional(), len(self.body))

    def take_system(self, system: dict[str, Any]) -> None:
        """Write back what a SQL action set."""
        self.message_id = system.get("MessageId")
        self.session_id = system.get("SessionId")
        self.correlation_id = system.get("CorrelationId")
        self.subject = system.get("Label")
        self.content_type = system.get("ContentType")
        self.reply_to = system.get("ReplyTo")
        self.reply_to_session_id = system.get("ReplyToSessionId")
        self.to = system.get("To")


def message_size(m: OutboundMessage) -> int:
    """A message's size as the size limit counts it: body, message id, optional properties and
    application properties (names and values as UTF-8 text); never more than its AMQP encoding."""
    # Every send measures every message: the common cases (ASCII text, str values) are inline.
    # isascii() is a flag CPython keeps on every str: ASCII text is measured without encoding it.
    size = len(m.body)
    for text in (m.message_id, *outbound_optional(m)):
        if text:
            size += len(text) if text.isascii() else len(text.encode("utf-8"))
    for key, value in m.application_properties.items():
        if type(key) is not str:
            key = str(key)
        size += len(key) if key.isascii() else len(key.encode("utf-8"))
        if type(value) is str:
            size += len(value) if value.isascii() else len(value.encode("utf-8"))
        else:
            size += _value_size(value)
    return size


def _utf8_len(text: str) -> int:
    # isascii() is a flag CPython keeps on every str: ASCII text is measured without encoding it.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _value_size(value: Any) -> int:
    """Bytes of an application property value: text as UTF-8, binary as is, scalars as 8."""
    if isinstance(value, str):
        return _utf8_len(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    return 8


def outbound_optional(m: OutboundMessage) -> OptionalProps:
    """An outbound message's optional properties, in the store's column order."""
    return (m.session_id, m.correlation_id, m.subject, m.content_type, m.reply_to, m.reply_to_session_id, m.to,
            m.partition_key)  # fmt: skip


def ttl_ms(seconds: float) -> int:
    """A time to live in ms, capped at the broker's "never"; BadInput unless positive."""
    ttl = int(round(min(seconds, MAX_TTL_S) * 1000))
    if ttl <= 0:
        raise NotPositive("time to live must be positive")
    return ttl


def new_message_id() -> str:
    """A fresh message id."""
    return os.urandom(16).hex()


def message_ids(n: int) -> Iterator[str]:
    """n fresh message ids from one call to the OS's random source (uuid4 per message costs more)."""
    blob = os.urandom(16 * n).hex()
    return (blob[i : i + 32] for i in range(0, 32 * n, 32))


def lock_tokens(n: int) -> Iterator[str]:
    """n lock tokens in UUID form from one call to the OS's random source."""
    blob = os.urandom(16 * n).hex()
    for i in range(0, 32 * n, 32):
        h = blob[i : i + 32]
        yield f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
