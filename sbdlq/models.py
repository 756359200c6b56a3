"""Plain data: messages, counts, and (re-exported from the modules that hold them) what is
sent, entity descriptions and subscription rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from importlib import import_module
from operator import attrgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbdlq.entity_info import EntityInfo as EntityInfo
    from sbdlq.entity_info import SubscriptionRule as SubscriptionRule
    from sbdlq.entity_info import SubscriptionRules as SubscriptionRules
    from sbdlq.outbound import Choose as Choose
    from sbdlq.outbound import MovedBatch as MovedBatch
    from sbdlq.outbound import OutboundMessage as OutboundMessage

#: Names sbdlq.models still answers for, and the module each lives in: loaded when first asked
#: for, because `count` uses none of them and making their dataclasses costs its start.
_ELSEWHERE = {
    "OutboundMessage": "sbdlq.outbound",
    "Choose": "sbdlq.outbound",
    "MovedBatch": "sbdlq.outbound",
    "EntityInfo": "sbdlq.entity_info",
    "SubscriptionRule": "sbdlq.entity_info",
    "SubscriptionRules": "sbdlq.entity_info",
}


def __getattr__(name: str) -> Any:
    """A class that lives elsewhere (_ELSEWHERE), from its module, loaded on first use."""
    module = _ELSEWHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)


# Application property names the broker sets on dead-lettered messages.
DEAD_LETTER_REASON = "DeadLetterReason"
DEAD_LETTER_DESCRIPTION = "DeadLetterErrorDescription"
RESUBMITTED_FROM = "sbdlq-resubmitted-from"
#: How many times sbdlq has sent a copy of this message back (resubmit, replay, apply): the
#: original's count + 1 on each copy, so `max_attempts` can stop a message that keeps failing.
ATTEMPT = "sbdlq-attempt"


def attempt_of(properties: dict[str, Any]) -> int:
    """The attempt count a message carries: its `sbdlq-attempt` (a whole number, or its text), else 0."""
    value = properties.get(ATTEMPT)
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, value)
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2**63:
        return int(value)  # a record some tool rewrote with 2.0 for 2
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return 0


def fits_int64(value: int) -> bool:
    """Whether an integer fits an AMQP long, the widest integer a Service Bus property holds."""
    return -(2**63) <= value < 2**63


# The broker's "never expires": TimeSpan.MaxValue, in seconds.
MAX_TTL_S = 10675199 * 86400.0


class ReceiveMode(Enum):
    """How a receiver takes messages: locked until settled, or deleted as received."""

    PEEK_LOCK = "peek-lock"
    RECEIVE_AND_DELETE = "receive-and-delete"


def iso(ts: datetime | None) -> str | None:
    """ISO 8601 in UTC with a Z, or None."""
    if ts is None:
        return None
    if ts.tzinfo is not UTC:
        ts = ts.astimezone(UTC)
    return ts.isoformat().replace("+00:00", "Z")


def _base64(data: bytes) -> str:
    """Bytes as base64 text (base64 imported here: most bodies are text, and `count` shows none)."""
    from base64 import b64encode

    return b64encode(data).decode("ascii")


def body_text(body: bytes) -> tuple[str, str]:
    """The body as JSON text and its encoding (`utf-8`, else `base64`)."""
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return _base64(body), "base64"


@dataclass(slots=True)
class Message:
    """A message as the broker holds it, with broker-set properties."""

    sequence_number: int
    body: bytes
    enqueued_time: datetime
    message_id: str | None = None
    expires_at: datetime | None = None
    delivery_count: int = 0
    subject: str | None = None
    correlation_id: str | None = None
    content_type: str | None = None
    session_id: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    to: str | None = None
    partition_key: str | None = None
    time_to_live_s: float | None = None
    application_properties: dict[str, Any] = field(default_factory=dict)
    dead_letter_source: str | None = None
    scheduled_enqueue_time: datetime | None = None
    state: str = "active"  # active | deferred | scheduled
    lock_token: str | None = None
    locked_until: datetime | None = None
    body_type: str = "data"
    amqp: bytes | None = None  # as OutboundMessage.amqp (sbdlq.outbound)

    @property
    def dead_letter_reason(self) -> str | None:
        value = self.application_properties.get(DEAD_LETTER_REASON)
        return None if value is None else str(value)

    @property
    def dead_letter_error_description(self) -> str | None:
        value = self.application_properties.get(DEAD_LETTER_DESCRIPTION)
        return None if value is None else str(value)

    def to_json(self) -> dict[str, Any]:
        """The Message JSON shape of DESIGN §4."""
        if self.body_type == "data":
            text, encoding = body_text(self.body)
        else:
            # An amqp-value or amqp-sequence body is its AMQP encoding: always base64, never
            # text that happens to decode.
            text, encoding = _base64(self.body), "base64"
        # The system properties, in MESSAGE_FIELDS' order (one C call reads them all: export's hot path).
        doc = dict(zip(_FIELD_NAMES, _read_fields(self), strict=True))
        for name in _TIME_FIELDS:
            doc[name] = iso(doc[name])
        doc["application_properties"] = {
            k: v if type(v) in _PLAIN else _jsonable(v) for k, v in self.application_properties.items()
        }
        doc["body"] = text
        doc["body_encoding"] = encoding
        return doc


@dataclass(frozen=True, slots=True)
class MessageField:
    """One system property of a message, as every view of it (JSON, detail, console columns) names it."""

    #: its key in the Message JSON shape (DESIGN §4), and the Message attribute that holds it
    name: str
    #: a short column title (the console's tables)
    title: str
    #: how the JSON shape holds it: "int", "text", "time" (ISO 8601 UTC, Z) or "seconds"
    kind: str
    #: a dead-letter mark the broker keeps in the application properties, not a field of its own
    from_properties: bool = False

    def value(self, m: Message) -> Any:
        """The value on the message (a datetime for a time)."""
        return getattr(m, self.name)


#: The system properties of a message, in the order of the Message JSON shape: the one list the
#: JSON shape, the detail view, the console's columns and the record reader read.
MESSAGE_FIELDS: tuple[MessageField, ...] = (
    MessageField("sequence_number", "seq", "int"),
    MessageField("message_id", "message id", "text"),
    MessageField("enqueued_time", "enqueued", "time"),
    MessageField("expires_at", "expires", "time"),
    MessageField("delivery_count", "deliveries", "int"),
    MessageField("dead_letter_reason", "reason", "text", from_properties=True),
    MessageField("dead_letter_error_description", "description", "text", from_properties=True),
    MessageField("dead_letter_source", "source", "text"),
    MessageField("subject", "subject", "text"),
    MessageField("correlation_id", "correlation id", "text"),
    MessageField("content_type", "content type", "text"),
    MessageField("session_id", "session id", "text"),
    MessageField("reply_to", "reply to", "text"),
    MessageField("to", "to", "text"),
    MessageField("time_to_live_s", "ttl (s)", "seconds"),
)
MESSAGE_FIELD = {f.name: f for f in MESSAGE_FIELDS}
_FIELD_NAMES = tuple(f.name for f in MESSAGE_FIELDS)
_TIME_FIELDS = tuple(f.name for f in MESSAGE_FIELDS if f.kind == "time")
_read_fields = attrgetter(*_FIELD_NAMES)


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, bytes):
        return _base64(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


@dataclass(frozen=True, slots=True)
class CountField:
    """One count of an entity, as every view of it names it (JSON, table, Prometheus, console)."""

    #: the Counts attribute, its JSON key and `count` table column, and its Prometheus `queue` label
    name: str
    #: the console's column title (ui/entities_pane.py)
    console_title: str
    #: a dead-letter sub-queue: the console shows these first, its reason to exist
    dead_letter: bool = False


#: Every count of an entity, in the order `count` writes them (JSON, table, Prometheus series).
COUNT_FIELDS: tuple[CountField, ...] = (
    CountField("active", "active"),
    CountField("dead_letter", "dlq", dead_letter=True),
    CountField("transfer_dead_letter", "tdlq", dead_letter=True),
    CountField("scheduled", "sched"),
)
COUNT_NAMES = tuple(f.name for f in COUNT_FIELDS)


@dataclass(slots=True)
class Counts:
    """An entity's counts: one attribute per COUNT_FIELDS entry (tests/unit/test_count_fields.py)."""

    entity: str
    active: int = 0
    dead_letter: int = 0
    transfer_dead_letter: int = 0
    scheduled: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"entity": self.entity, **{name: getattr(self, name) for name in COUNT_NAMES}}
