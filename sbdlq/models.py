"""Plain data: counts and the names and values messages share; re-exported from the modules
that hold them, messages (sbdlq.messages), what is sent, entity descriptions and rules."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbdlq.entity_info import EntityInfo as EntityInfo
    from sbdlq.entity_info import SubscriptionRule as SubscriptionRule
    from sbdlq.entity_info import SubscriptionRules as SubscriptionRules
    from sbdlq.messages import MESSAGE_FIELD as MESSAGE_FIELD
    from sbdlq.messages import MESSAGE_FIELDS as MESSAGE_FIELDS
    from sbdlq.messages import Message as Message
    from sbdlq.messages import MessageField as MessageField
    from sbdlq.outbound import Choose as Choose
    from sbdlq.outbound import MovedBatch as MovedBatch
    from sbdlq.outbound import OutboundMessage as OutboundMessage

#: Names sbdlq.models still answers for, and the module each lives in: loaded when first asked
#: for, because `count` uses none of them and making their dataclasses costs its start.
_ELSEWHERE = {
    "Message": "sbdlq.messages",
    "MessageField": "sbdlq.messages",
    "MESSAGE_FIELDS": "sbdlq.messages",
    "MESSAGE_FIELD": "sbdlq.messages",
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


def base64_text(data: bytes) -> str:
    """Bytes as base64 text (base64 imported here: most bodies are text, and `count` shows none)."""
    from base64 import b64encode

    return b64encode(data).decode("ascii")


def body_text(body: bytes) -> tuple[str, str]:
    """The body as JSON text and its encoding (`utf-8`, else `base64`)."""
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64_text(body), "base64"


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
