"""A message as the broker holds it (Message) and its system properties (`MESSAGE_FIELDS`).

Apart from sbdlq.models (which re-exports them) so that `count`, which shows no message,
starts without making them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import Any

from sbdlq.models import DEAD_LETTER_DESCRIPTION, DEAD_LETTER_REASON, base64_text, body_text, iso


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
            text, encoding = base64_text(self.body), "base64"
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
        return base64_text(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
