"""Encoded AMQP messages ⇄ sbdlq models (what producers send, what the broker hands out)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from proton import Data, Described, int32, symbol, uint, ulong

from sbdlq.models import Message, OutboundMessage

from . import sections as sec
from .kept_sections import Kept, decode_value, keep
from .plain_values import as_text, to_plain, to_timestamp

# Message annotations the Service Bus SDKs read (azure-servicebus _common/constants.py).
SEQUENCE_NUMBER = "x-opt-sequence-number"
ENQUEUE_SEQUENCE_NUMBER = "x-opt-enqueue-sequence-number"
ENQUEUED_TIME = "x-opt-enqueued-time"
LOCKED_UNTIL = "x-opt-locked-until"
LOCK_TOKEN = "x-opt-lock-token"
DEADLETTER_SOURCE = "x-opt-deadletter-source"
SCHEDULED_ENQUEUE_TIME = "x-opt-scheduled-enqueue-time"
PARTITION_KEY = "x-opt-partition-key"
MESSAGE_STATE = "x-opt-message-state"
_STATES = {"active": 0, "deferred": 1, "scheduled": 2}
_UINT_MAX = 2**32 - 1
#: the message-format of a batch envelope (the Microsoft batching convention Service Bus uses)
BATCH_FORMAT = 0x80013700


def _field(values: list[Any], index: int) -> Any:
    return values[index] if index < len(values) else None


def decode_message(payload: bytes) -> OutboundMessage:
    """One encoded message as an OutboundMessage; sections.MalformedMessage when it isn't one."""
    parts = sec.split(payload)
    out = OutboundMessage()
    body_sections: list[sec.Section] = []
    decoded: dict[int, Any] = {}
    for part in parts:
        if part.code in sec.BODY_CODES:
            body_sections.append(part)
            continue
        if part.code in (sec.DELIVERY_ANNOTATIONS, sec.FOOTER):
            continue  # per-hop annotations are not stored; the footer is kept as sent
        value = decoded[part.code] = decode_value(part.raw)
        if part.code == sec.HEADER:
            ttl = _field(list(value or []), 2)
            if ttl:
                out.time_to_live_s = int(ttl) / 1000
        elif part.code == sec.MESSAGE_ANNOTATIONS:
            _apply_annotations(out, dict(value or {}))
        elif part.code == sec.PROPERTIES:
            _apply_properties(out, list(value or []))
        elif part.code == sec.APPLICATION_PROPERTIES:
            out.application_properties = {str(k): to_plain(v) for k, v in dict(value or {}).items()}
    _apply_body(out, body_sections)
    out.amqp = keep(parts, decoded)
    return out


def _apply_annotations(out: OutboundMessage, annotations: dict[Any, Any]) -> None:
    names = {str(k): v for k, v in annotations.items()}
    when = names.get(SCHEDULED_ENQUEUE_TIME)
    if when is not None:
        plain = to_plain(when)
        if isinstance(plain, datetime):
            out.scheduled_enqueue_time = plain
    key = names.get(PARTITION_KEY)
    if key is not None:
        out.partition_key = as_text(key)


def _apply_properties(out: OutboundMessage, props: list[Any]) -> None:
    out.message_id = as_text(_field(props, 0))
    out.to = as_text(_field(props, 2))
    out.subject = as_text(_field(props, 3))
    out.reply_to = as_text(_field(props, 4))
    out.correlation_id = as_text(_field(props, 5))
    out.content_type = as_text(_field(props, 6))
    out.session_id = as_text(_field(props, 10))
    out.reply_to_session_id = as_text(_field(props, 12))


def _apply_body(out: OutboundMessage, body: list[sec.Section]) -> None:
    if not body:
        out.body, out.body_type = b"", "data"
    elif all(s.code == sec.DATA for s in body):
        out.body, out.body_type = b"".join(sec.data_payload(s) for s in body), "data"
    else:
        # value and sequence bodies are kept encoded so they go back out unchanged
        out.body = b"".join(s.raw for s in body)
        out.body_type = "value" if body[0].code == sec.AMQP_VALUE else "sequence"


def decode_transfer(payload: bytes, message_format: int | None = None) -> list[OutboundMessage]:
    """The messages of one transfer: a batch envelope (format 0x80013700) or a single message.

    A batch is known by its transfer's message-format, whatever its envelope carries (the
    JavaScript SDK copies the first message's application properties onto it), and its data
    sections must each hold an encoded message. Where the format is unknown (None: no wire
    filter read the transfer), a body made only of data sections that are each a whole
    message, under an envelope without application properties, is taken for a batch.
    """
    parts = sec.split(payload)
    body = [s for s in parts if s.code in sec.BODY_CODES]
    if message_format == BATCH_FORMAT:
        if not all(s.code == sec.DATA for s in body):
            raise sec.MalformedMessage("a batch (message-format 0x80013700) must carry its messages in data sections")
        inner = [sec.data_payload(s) for s in body]
        if not all(sec.looks_like_message(p) for p in inner):
            raise sec.MalformedMessage("a batch (message-format 0x80013700) data section is not an encoded message")
        return [decode_message(p) for p in inner]
    if message_format is not None:
        return [decode_message(payload)]
    if body and all(s.code == sec.DATA for s in body) and not any(s.code == sec.APPLICATION_PROPERTIES for s in parts):
        inner = [sec.data_payload(s) for s in body]
        if all(sec.looks_like_message(p) for p in inner):
            return [decode_message(p) for p in inner]
    return [decode_message(payload)]


def _encode(descriptor: int, value: Any) -> bytes:
    data = Data()
    data.put_object(Described(ulong(descriptor), value))
    return data.encode()


def _trim(fields: list[Any]) -> list[Any]:
    """Drop trailing nulls: the list encoding allows it and keeps messages small."""
    while fields and fields[-1] is None:
        fields.pop()
    return fields


def encode_message(
    msg: Message,
    *,
    delivery_count: int,
    lock_token: str | None = None,
    locked_until: datetime | None = None,
) -> bytes:
    """A stored message as the encoded AMQP message a Service Bus SDK receives.

    delivery_count goes in the header as is: callers pass the number of earlier
    deliveries, as the broker does (the .NET SDK adds one; the Python SDK shows it raw).
    The sections kept as sent (kept_sections.py) come back with the broker's fields set afresh.
    """
    kept = Kept.of(msg.amqp)
    ttl = None
    if msg.time_to_live_s is not None and 0 < msg.time_to_live_s * 1000 <= _UINT_MAX:
        ttl = uint(round(msg.time_to_live_s * 1000))
    header = [kept.header_field(0, True), kept.header_field(1), ttl, kept.header_field(3), uint(max(0, delivery_count))]
    parts = [_encode(sec.HEADER, _trim(header))]
    if lock_token is not None:
        parts.append(_encode(sec.DELIVERY_ANNOTATIONS, {symbol(LOCK_TOKEN): uuid.UUID(lock_token)}))
    parts.append(_encode(sec.MESSAGE_ANNOTATIONS, {**kept.custom_annotations(), **_annotations(msg, locked_until)}))
    parts.append(_encode(sec.PROPERTIES, _properties(msg, kept)))
    if msg.application_properties:
        parts.append(_encode(sec.APPLICATION_PROPERTIES, kept.app_properties_for(msg.application_properties)))
    if msg.body_type in ("value", "sequence"):
        parts.append(bytes(msg.body))
    else:
        parts.extend(kept.data_sections_for(msg.body) or [_encode(sec.DATA, bytes(msg.body))])
    if kept.footer is not None:
        parts.append(kept.footer)
    return b"".join(parts)


def _annotations(msg: Message, locked_until: datetime | None) -> dict[symbol, Any]:
    notes: dict[symbol, Any] = {
        symbol(SEQUENCE_NUMBER): int(msg.sequence_number),
        # The number first given at the point of submission: the engine keeps it through
        # topic fan-out and auto-forwarding, so it is the sequence number.
        symbol(ENQUEUE_SEQUENCE_NUMBER): int(msg.sequence_number),
        symbol(ENQUEUED_TIME): to_timestamp(msg.enqueued_time),
    }
    if locked_until is not None:
        notes[symbol(LOCKED_UNTIL)] = to_timestamp(locked_until)
    if msg.dead_letter_source:
        notes[symbol(DEADLETTER_SOURCE)] = msg.dead_letter_source
    if msg.scheduled_enqueue_time is not None:
        notes[symbol(SCHEDULED_ENQUEUE_TIME)] = to_timestamp(msg.scheduled_enqueue_time)
    if msg.partition_key:
        notes[symbol(PARTITION_KEY)] = msg.partition_key
    state = _STATES.get(msg.state, 0)
    if state:
        notes[symbol(MESSAGE_STATE)] = int32(state)
    return notes


def _properties(msg: Message, kept: Kept) -> list[Any]:
    expiry = to_timestamp(msg.expires_at) if msg.expires_at is not None else None
    created = kept.property_field(9)
    return _trim(
        [
            kept.typed_id(0, msg.message_id),
            kept.property_field(1),
            msg.to,
            msg.subject,
            msg.reply_to,
            kept.typed_id(5, msg.correlation_id),
            symbol(msg.content_type) if msg.content_type else None,
            kept.property_field(7),
            expiry,
            created if created is not None else to_timestamp(msg.enqueued_time),
            msg.session_id,
            kept.property_field(11),
            msg.reply_to_session_id,
        ]
    )
