"""SDK messages and entity descriptions ↔ sbdlq's plain models (Message, OutboundMessage, EntityInfo)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from urllib.parse import urlsplit

from sbdlq.addresses import EntityPath
from sbdlq.backends.servicebus.errors import first_line
from sbdlq.backends.servicebus.shortcuts import SdkShims, Shortcuts
from sbdlq.errors import BadInput
from sbdlq.models import MAX_TTL_S, EntityInfo, Message, OutboundMessage, SubscriptionRule

# AMQP header ttl is a uint of milliseconds (about 49.7 days).
_UINT_MAX = 0xFFFFFFFF
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_STATES = {0: "active", 1: "deferred", 2: "scheduled"}
# Expiry in the broker's last year (DateTime.MaxValue is 9999-12-31) means "never expires".
_NEVER_YEAR = 9999
# Message annotations the broker sets (the SDK's own keys, all public AMQP names).
_SEQUENCE_KEY = b"x-opt-sequence-number"
_STATE_KEY = b"x-opt-message-state"
_PARTITION_KEY = b"x-opt-partition-key"
_DEAD_LETTER_SOURCE_KEY = b"x-opt-deadletter-source"
_SCHEDULED_KEY = b"x-opt-scheduled-enqueue-time"
#: the longest message id, session id, partition key or reply-to session id Service Bus takes
_ID_MAX_LENGTH = 128


#: the shims of callers that keep no shortcut policy of their own (the backend passes its own)
_DEFAULT_SHIMS = SdkShims(Shortcuts(True, "on (no policy given)"))


def from_sdk_message(
    sdk: Any, *, locked: bool = True, received: bool | None = None, shims: SdkShims = _DEFAULT_SHIMS
) -> Message:
    """An SDK ServiceBusReceivedMessage as a plain Message.

    received (default: locked) says the message was delivered to us rather than peeked: its
    delivery count then includes this delivery, as sbdlq counts (.NET's DeliveryCount); the
    header, which the Python SDK shows as is, holds the earlier deliveries only.

    The AMQP properties are read once from the (public) raw message: each of the SDK's
    accessors checks the properties section's length first, which lists its fields each
    time, and this runs for every message a run receives.
    """
    raw = sdk.raw_amqp_message
    body, body_type = _body_of(raw, shims)
    props = raw.properties
    annotations = raw.annotations or {}
    header = raw.header
    state = annotations.get(_STATE_KEY)
    token = sdk.lock_token if locked else None
    delivered = locked if received is None else received
    enqueued = sdk.enqueued_time_utc
    expires_at, ttl_s = _expiry(raw, enqueued)
    app = raw.application_properties
    return Message(
        sequence_number=int(annotations.get(_SEQUENCE_KEY) or 0),
        body=body,
        enqueued_time=enqueued or EPOCH,
        message_id=_text(props.message_id) if props is not None else None,
        expires_at=expires_at,
        delivery_count=int((header.delivery_count if header is not None else 0) or 0) + (1 if delivered else 0),
        subject=_text(props.subject) if props is not None else None,
        correlation_id=_text(props.correlation_id) if props is not None else None,
        content_type=_text(props.content_type) if props is not None else None,
        session_id=_text(props.group_id) if props is not None else None,
        reply_to=_text(props.reply_to) if props is not None else None,
        reply_to_session_id=_text(props.reply_to_group_id) if props is not None else None,
        to=_text(props.to) if props is not None else None,
        partition_key=_text(annotations.get(_PARTITION_KEY)),
        time_to_live_s=ttl_s,
        application_properties={str(_texts(k)): _texts(v) for k, v in app.items()} if app else {},
        dead_letter_source=_text(annotations.get(_DEAD_LETTER_SOURCE_KEY)),
        scheduled_enqueue_time=sdk.scheduled_enqueue_time_utc,
        state=_STATES.get(int(state), "active") if isinstance(state, int) else "active",
        lock_token=str(token) if token else None,
        locked_until=sdk.locked_until_utc if token else None,
        body_type=body_type,
    )


def _expiry(raw: Any, enqueued: datetime | None) -> tuple[datetime | None, float | None]:
    """When a received message expires and its time to live; (None, None) when it never does.

    The header's ttl (a uint of milliseconds) from the enqueued time, as the SDK's
    expires_at_utc; past ~49.7 days only the absolute expiry time can say. The broker's
    DateTime.MaxValue (year 9999) means "never".
    """
    header_ttl = getattr(raw.header, "time_to_live", None) if raw.header is not None else None
    props = raw.properties
    absolute = getattr(props, "absolute_expiry_time", None) if props is not None else None
    created = getattr(props, "creation_time", None) if props is not None else None
    ttl: timedelta | None
    try:
        if header_ttl and enqueued is not None:
            ttl = timedelta(milliseconds=int(header_ttl))
            expires = enqueued + ttl
        elif absolute:
            expires = EPOCH + timedelta(milliseconds=int(absolute))
            start = EPOCH + timedelta(milliseconds=int(created)) if created else enqueued
            ttl = expires - start if start is not None else None
        else:
            return None, None
    except (OverflowError, ValueError):
        return None, None  # beyond what datetime holds: never, for any practical purpose
    if expires.year >= _NEVER_YEAR or (ttl is not None and ttl.total_seconds() >= MAX_TTL_S):
        return None, None
    return expires, ttl.total_seconds() if ttl is not None else None


def to_sdk_message(out: OutboundMessage, shims: SdkShims = _DEFAULT_SHIMS) -> Any:
    """A fresh SDK AmqpAnnotatedMessage carrying everything an OutboundMessage sets.

    Built from the SDK's public AMQP classes in one go rather than through ServiceBusMessage,
    whose setters each check and rebuild the properties section (a third of a resubmit's
    client time per message went there); the SDK's own checks are kept (ids of at most 128
    characters, a partition key equal to the session id).
    """
    from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageHeader, AmqpMessageProperties

    _check_ids(out)
    message_id: Any = out.message_id
    annotations: dict[bytes, Any] = {}
    if out.partition_key:
        annotations[_PARTITION_KEY] = out.partition_key
    if out.scheduled_enqueue_time is not None:
        annotations[_SCHEDULED_KEY] = out.scheduled_enqueue_time
        if not message_id:
            message_id = str(uuid.uuid4())  # as the SDK does for a scheduled message
    props = AmqpMessageProperties(
        message_id=message_id,
        to=out.to,
        subject=out.subject,
        reply_to=out.reply_to,
        correlation_id=out.correlation_id,
        content_type=out.content_type,
        group_id=out.session_id,
        reply_to_group_id=out.reply_to_session_id,
    )
    header: Any = None
    if out.time_to_live_s is not None and 0 < out.time_to_live_s < MAX_TTL_S:
        # At least 1 ms: the SDK truncates to whole seconds, and 0 would mean "never expires".
        ttl_ms = max(1, round(out.time_to_live_s * 1000))
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        props.creation_time = now_ms
        props.absolute_expiry_time = now_ms + ttl_ms
        # The header's ttl is a uint: beyond ~49.7 days the broker goes by absolute expiry
        # minus creation time alone.
        if ttl_ms <= _UINT_MAX:
            header = AmqpMessageHeader(time_to_live=ttl_ms)
    body: dict[str, Any]
    if out.body_type == "data":
        body = {"data_body": out.body}
    else:
        value, sequence = _decode_sections(out.body, shims)
        body = {"sequence_body": sequence} if out.body_type == "sequence" else {"value_body": value}
    try:
        return AmqpAnnotatedMessage(
            header=header,
            properties=props,
            application_properties=cast(Any, dict(out.application_properties) or None),
            annotations=cast(Any, annotations or None),
            **body,
        )
    except (ValueError, TypeError) as exc:
        raise BadInput(f"cannot build {_label(out)}: {first_line(exc)}")


def _check_ids(out: OutboundMessage) -> None:
    """The SDK's own checks of a message it is to send: ids of at most 128 characters, one partition."""
    for name, value in (
        ("message_id", out.message_id),
        ("session_id", out.session_id),
        ("partition_key", out.partition_key),
        ("reply_to_session_id", out.reply_to_session_id),
    ):
        if value and len(str(value)) > _ID_MAX_LENGTH:
            raise BadInput(f"cannot build {_label(out)}: {name} cannot be longer than {_ID_MAX_LENGTH} characters.")
    if out.partition_key and out.session_id is not None and out.partition_key != out.session_id:
        raise BadInput(
            f"cannot build {_label(out)}: partition_key:{out.partition_key} cannot be set to a different "
            f"value than session_id:{out.session_id}"
        )


def _label(out: OutboundMessage) -> str:
    return f"message {out.message_id!r}" if out.message_id else "a message"


def _body_of(raw: Any, shims: SdkShims) -> tuple[bytes, str]:
    """Body bytes and kind: data sections joined; value/sequence as their AMQP encoding."""
    from azure.servicebus.amqp import AmqpMessageBodyType

    kind = raw.body_type
    if kind == AmqpMessageBodyType.VALUE:
        return shims.encode_body(value=_texts(raw.body)), "value"
    if kind == AmqpMessageBodyType.SEQUENCE:
        return shims.encode_body(sequence=[_texts(s) for s in raw.body]), "sequence"
    body = raw.body
    if body is None:
        return b"", "data"
    if isinstance(body, bytes):
        return body, "data"
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body), "data"
    sections = list(body)
    if len(sections) == 1 and type(sections[0]) is bytes:
        return sections[0], "data"  # the usual single section, as it is: no copy
    return b"".join(sections), "data"


def _decode_sections(body: bytes, shims: SdkShims) -> tuple[Any, list[Any] | None]:
    """The value and sequences held in encoded AMQP body sections."""
    if not body:
        return None, None
    try:
        value, sequence = shims.decode_body(body)
    except Exception:
        raise BadInput("a value/sequence message body is not a valid AMQP section")
    sections = [_texts(s) for s in sequence] if sequence is not None else None
    return _texts(value), sections


def _texts(value: Any) -> Any:
    """AMQP strings as str: the SDK hands strings back as bytes (binary that is valid UTF-8 too)."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value)
    if isinstance(value, list):
        return [_texts(v) for v in value]
    if isinstance(value, dict):
        return {_texts(k): _texts(v) for k, v in value.items()}
    return value


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _duration_s(value: Any, default: float) -> float:
    if isinstance(value, timedelta):
        return min(value.total_seconds(), MAX_TTL_S)
    return default


def entity_name(value: Any) -> str | None:
    """`https://ns.servicebus.windows.net/orders` (as the service reports forwarding) → `orders`."""
    if not value:
        return None
    text = str(value)
    if "://" in text:
        text = urlsplit(text).path
    return text.strip("/") or None


def _status(value: Any) -> str:
    return str(getattr(value, "value", value) or "Active")


def _receiver_settings(p: Any) -> dict[str, Any]:
    """The EntityInfo fields queues and subscriptions share: the SDK names them alike on both."""
    return {
        "requires_session": bool(p.requires_session),
        "lock_duration_s": _duration_s(p.lock_duration, 60.0),
        "max_delivery_count": int(p.max_delivery_count or 10),
        "default_ttl_s": _duration_s(p.default_message_time_to_live, MAX_TTL_S),
        "dead_lettering_on_expiration": bool(p.dead_lettering_on_message_expiration),
        "forward_to": entity_name(p.forward_to),
        "forward_dead_lettered_to": entity_name(p.forward_dead_lettered_messages_to),
        "status": _status(p.status),
    }


def queue_info(q: Any) -> EntityInfo:
    """EntityInfo of an SDK QueueProperties."""
    return EntityInfo(
        path=q.name,
        kind="queue",
        requires_duplicate_detection=bool(q.requires_duplicate_detection),
        **_receiver_settings(q),
    )


def topic_info(t: Any, subscription_count: int) -> EntityInfo:
    """EntityInfo of an SDK TopicProperties."""
    return EntityInfo(
        path=t.name,
        kind="topic",
        requires_duplicate_detection=bool(t.requires_duplicate_detection),
        default_ttl_s=_duration_s(t.default_message_time_to_live, MAX_TTL_S),
        status=_status(t.status),
        subscription_count=subscription_count,
    )


def subscription_info(topic: str, s: Any) -> EntityInfo:
    """EntityInfo of an SDK SubscriptionProperties."""
    return EntityInfo(
        path=str(EntityPath(topic, s.name)),
        kind="subscription",
        dead_lettering_on_filter_exceptions=bool(s.dead_lettering_on_filter_evaluation_exceptions),
        **_receiver_settings(s),
    )


def subscription_rule(r: Any) -> SubscriptionRule:
    """SubscriptionRule of an SDK RuleProperties (SQL, true, false or correlation filter, with parameters)."""
    flt, action = r.filter, r.action
    sql_action = getattr(action, "sql_expression", None) or None
    action_parameters = dict(getattr(action, "parameters", None) or {}) or None
    if flt is None:
        return SubscriptionRule(
            r.name, sql="1=1", action=sql_action, action_parameters=action_parameters, constant=True
        )
    if hasattr(flt, "sql_expression"):
        # The SDK's TrueRuleFilter and FalseRuleFilter are SqlRuleFilters of 1=1 and 1>1.
        constant = {"TrueRuleFilter": True, "FalseRuleFilter": False}.get(type(flt).__name__)
        parameters = dict(getattr(flt, "parameters", None) or {}) or None
        return SubscriptionRule(
            r.name,
            sql=flt.sql_expression or "1=1",
            action=sql_action,
            parameters=parameters,
            action_parameters=action_parameters,
            constant=constant,
        )
    fields = ("correlation_id", "message_id", "to", "reply_to", "label", "session_id", "reply_to_session_id",
              "content_type")  # fmt: skip
    correlation: dict[str, Any] = {f: getattr(flt, f, None) for f in fields}
    correlation["properties"] = dict(getattr(flt, "properties", None) or {})
    return SubscriptionRule(r.name, correlation=correlation, action=sql_action, action_parameters=action_parameters)


def sdk_filter(rule: SubscriptionRule) -> Any:
    """The SDK filter of a rule: correlation, True, False (`constant`) or SQL (with its parameters)."""
    from azure.servicebus.management import CorrelationRuleFilter, FalseRuleFilter, SqlRuleFilter, TrueRuleFilter

    if rule.correlation is not None:
        fields = {str(k): v for k, v in rule.correlation.items() if k != "properties"}
        return CorrelationRuleFilter(**fields, properties=rule.correlation.get("properties") or None)
    if rule.constant is not None:
        return TrueRuleFilter() if rule.constant else FalseRuleFilter()
    return SqlRuleFilter(rule.sql or "1=1", parameters=rule.parameters or None)


def sdk_action(rule: SubscriptionRule) -> Any:
    """The SDK action of a rule (None: no action)."""
    if not rule.action:
        return None
    from azure.servicebus.management import SqlRuleAction

    return SqlRuleAction(rule.action, parameters=rule.action_parameters or None)
