"""One message with every field a producer can set, for the tests that check a hop keeps them all.

Each field holds its own value, so a field dropped or copied into another shows up. The
session id and the partition key are equal because Service Bus requires it when both are set.
"""

from __future__ import annotations

from typing import Any

from sbdlq.models import OutboundMessage

#: What a producer sets on a message, other than its application properties.
PRODUCER_FIELDS: dict[str, Any] = {
    "body": b'{"order": 7}',
    "message_id": "id-7",
    "content_type": "application/json",
    "correlation_id": "corr",
    "subject": "orders",
    "to": "fulfilment",
    "reply_to": "replies",
    "reply_to_session_id": "rs",
    "session_id": "s-1",
    "partition_key": "s-1",
    "time_to_live_s": 3600,
}
#: Application properties of every simple type a producer sends.
APPLICATION_PROPERTIES: dict[str, Any] = {"tenant": "eu", "attempt": 2, "vip": True, "ratio": 0.5}


def full_message(**overrides: Any) -> OutboundMessage:
    """An OutboundMessage with every producer field set (overrides replace single fields)."""
    fields = {**PRODUCER_FIELDS, "application_properties": dict(APPLICATION_PROPERTIES), **overrides}
    return OutboundMessage(**fields)


def producer_fields(message: Any) -> dict[str, Any]:
    """The producer-set fields of a Message or OutboundMessage, to compare what went in and came out."""
    return {name: getattr(message, name) for name in PRODUCER_FIELDS}
