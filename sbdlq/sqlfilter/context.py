"""The (system, properties) pair a filter sees for a Message or an OutboundMessage, and the
system properties a subscription's rules see on a message arriving at a topic (`system_view`)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbdlq.messages import Message
    from sbdlq.outbound import OutboundMessage


def message_context(msg: Message | OutboundMessage) -> tuple[dict[str, Any], dict[str, Any]]:
    """System properties (canonical names, no `sys.`) and a shallow copy of the application properties."""
    # Here, not at the top: the engine's vocabulary imports this module, and `count` makes no Message.
    from sbdlq.messages import Message

    ttl = None if msg.time_to_live_s is None else timedelta(seconds=msg.time_to_live_s)
    system: dict[str, Any] = {
        "MessageId": msg.message_id,
        "CorrelationId": msg.correlation_id,
        "Label": msg.subject,
        "To": msg.to,
        "ReplyTo": msg.reply_to,
        "ReplyToSessionId": msg.reply_to_session_id,
        "SessionId": msg.session_id,
        "ContentType": msg.content_type,
        "PartitionKey": msg.partition_key,
        "TimeToLive": ttl,
        "ScheduledEnqueueTimeUtc": msg.scheduled_enqueue_time,
        # The body length stands in for the broker's serialized size.
        "Size": len(msg.body),
    }
    if isinstance(msg, Message):
        # Broker-set fields; an OutboundMessage has not been through a broker yet.
        system.update(
            DeliveryCount=msg.delivery_count,
            SequenceNumber=msg.sequence_number,
            # Equal to SequenceNumber unless auto-forwarded, which the model doesn't track.
            EnqueuedSequenceNumber=msg.sequence_number,
            EnqueuedTimeUtc=msg.enqueued_time,
            ExpiresAtUtc=msg.expires_at,
            DeadLetterSource=msg.dead_letter_source,
            LockToken=msg.lock_token,
            LockedUntilUtc=msg.locked_until,
        )
    return system, dict(msg.application_properties)


def system_view(
    message_id: str | None,
    session_id: str | None,
    correlation_id: str | None,
    subject: str | None,
    content_type: str | None,
    reply_to: str | None,
    reply_to_session_id: str | None,
    to: str | None,
    partition_key: str | None,
    size: int,
) -> dict[str, Any]:
    """The system properties, by their SQL names, a subscription's rules evaluate on a message
    sent to its topic (the emulator engine's drafts, and the routing check's copies)."""
    return {
        "MessageId": message_id,
        "SessionId": session_id,
        "CorrelationId": correlation_id,
        "Label": subject,
        "ContentType": content_type,
        "ReplyTo": reply_to,
        "ReplyToSessionId": reply_to_session_id,
        "To": to,
        "PartitionKey": partition_key,
        "Size": size,
    }


def outbound_system(m: OutboundMessage) -> dict[str, Any]:
    """`system_view` of a message on its way into a topic."""
    return system_view(
        m.message_id,
        m.session_id,
        m.correlation_id,
        m.subject,
        m.content_type,
        m.reply_to,
        m.reply_to_session_id,
        m.to,
        m.partition_key,
        len(m.body),
    )
