"""The `<entity>/$management` request-response operations, over the engine.

Request bodies and reply shapes are the ones azure-servicebus sends and parses
(_servicebus_receiver.py, _servicebus_sender.py, _common/mgmt_handlers.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proton import Data, Message, int32, symbol

from sbdlq.addresses import Address, SubQueue
from sbdlq.emulator.engine import Engine
from sbdlq.errors import BadInput, LockLost
from sbdlq.models import ReceiveMode

from . import codec, conditions
from .plain_values import array, as_list, as_text, from_timestamp, to_plain, to_timestamp
from .rule_ops import RULE_OPERATIONS
from .session_ops import SESSION_OPERATIONS

PEEK = "com.microsoft:peek-message"
RENEW_LOCK = "com.microsoft:renew-lock"
RECEIVE_BY_SEQUENCE = "com.microsoft:receive-by-sequence-number"
UPDATE_DISPOSITION = "com.microsoft:update-disposition"
SCHEDULE = "com.microsoft:schedule-message"
CANCEL_SCHEDULED = "com.microsoft:cancel-scheduled-message"
BATCH_DELETE = "com.microsoft:batch-delete-messages"
#: messages one batch-delete request may name: Service Bus Standard's limit (Premium: 4,000)
BATCH_DELETE_MAX = 500
#: the description of a batch delete's reply when nothing matched
NOTHING_TO_DELETE = "No messages to delete."


@dataclass(slots=True)
class Reply:
    """A management response: status code and description, an optional body and error condition."""

    status: int
    description: str
    body: Any = None
    condition: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _ok(body: Any = None) -> Reply:
    return Reply(200, "OK", body)


def _tokens(body: dict[str, Any]) -> list[str]:
    return [str(t if isinstance(t, uuid.UUID) else uuid.UUID(str(t))) for t in as_list(body.get("lock-tokens"))]


def _peek(engine: Engine, address: Address, body: dict[str, Any]) -> Reply:
    start = int(body.get("from-sequence-number") or 0)
    count = int(body.get("message-count") or 1)
    found = engine.peek(address, start, count)
    if not found:
        return Reply(204, "No Content")
    # A peeked message's delivery count is its earlier deliveries, as the broker reports it.
    return _ok({"messages": [{"message": codec.encode_message(m, delivery_count=m.delivery_count)} for m in found]})


def _renew(engine: Engine, address: Address, body: dict[str, Any]) -> Reply:
    tokens = _tokens(body)
    if not tokens:
        # Never a 200 with empty expirations: azure-servicebus cannot decode an empty array
        # (values.array). Proton reads the SDK's own empty array (no element constructor) as null.
        raise BadInput("lock-tokens must name at least one lock token")
    renewed = engine.renew_locks(address, tokens)
    if any(t not in renewed for t in tokens):
        raise LockLost(conditions.LOCK_LOST_TEXT)
    stamps = [to_timestamp(renewed[t]) for t in tokens]
    return _ok({"expirations": array(Data.TIMESTAMP, stamps)})


def _receive_by_sequence(engine: Engine, address: Address, body: dict[str, Any]) -> Reply:
    numbers = [int(n) for n in as_list(body.get("sequence-numbers"))]
    # receiver-settle-mode: 0 = first (receive-and-delete), 1 = second (peek-lock)
    mode = ReceiveMode.RECEIVE_AND_DELETE if int(body.get("receiver-settle-mode", 1)) == 0 else ReceiveMode.PEEK_LOCK
    found = engine.receive_deferred(address, numbers, mode=mode)
    entries = []
    for m in found:
        entry: dict[str, Any] = {
            "message": codec.encode_message(
                m, delivery_count=m.delivery_count - 1, lock_token=m.lock_token, locked_until=m.locked_until
            )
        }
        if m.lock_token:
            entry["lock-token"] = uuid.UUID(m.lock_token)
        entries.append(entry)
    return _ok({"messages": entries})


def _update_disposition(engine: Engine, address: Address, body: dict[str, Any]) -> Reply:
    status = as_text(body.get("disposition-status")) or ""
    tokens = _tokens(body)
    props = body.get("properties-to-modify")
    modify = {str(k): to_plain(v) for k, v in dict(props).items()} if props else None
    if status == "completed":
        lost = engine.complete(address, tokens)
    elif status == "abandoned":
        lost = engine.abandon(address, tokens, modify)
    elif status == "defered":
        lost = engine.defer(address, tokens, modify)
    elif status == "suspended":
        lost = engine.dead_letter(
            address,
            tokens,
            as_text(body.get("deadletter-reason")),
            as_text(body.get("deadletter-description")),
            modify,
        )
    else:
        raise BadInput(f"unknown disposition-status {status!r}")
    if lost:
        raise LockLost(conditions.LOCK_LOST_TEXT)
    return _ok()


def _schedule(engine: Engine, address: Address, body: dict[str, Any]) -> Reply:
    if address.sub_queue is not SubQueue.NONE or address.entity.is_subscription:
        raise BadInput("messages are scheduled on a queue or a topic")
    messages = []
    for entry in as_list(body.get("messages")):
        messages.extend(codec.decode_transfer(bytes(entry["message"])))
    if not messages:  # no empty sequence-numbers array either (values.array)
        raise BadInput("messages must hold at least one message to schedule")
    numbers = engine.send(address.entity, messages)
    return _ok({"sequence-numbers": array(Data.LONG, [int(n) for n in numbers])})


def _cancel(engine: Engine, address: Address, body: dict[str, Any]) -> Reply:
    engine.cancel_scheduled(address.entity, [int(n) for n in as_list(body.get("sequence-numbers"))])
    return _ok()


def _batch_delete(engine: Engine, address: Address, body: dict[str, Any]) -> Reply:
    count = int(body.get("message-count") or 0)
    if not 0 < count <= BATCH_DELETE_MAX:
        # Service Bus Standard's answer, word for word, to a count past its limit (a Premium
        # client's 4,000): nothing deleted, and the client may ask again with fewer.
        text = f"Invalid Message Count : requested {count}. Message count should be between 1 and {BATCH_DELETE_MAX}."
        return Reply(400, text, condition=conditions.ARGUMENT_OUT_OF_RANGE)
    if body.get("session-id") is not None:
        raise BadInput("batch delete by session is not supported by sbdlq")
    raw = body.get("enqueued-time-utc")
    before = None if raw is None else from_timestamp(int(raw))
    gone = engine.delete_messages(address, count, before=before)
    if not gone:
        # Service Bus answers an empty batch delete with message-not-found, not a bare 204
        # (which one SDK takes for an error); the SDKs read it as "0 deleted".
        return Reply(404, NOTHING_TO_DELETE, condition=conditions.MESSAGE_NOT_FOUND)
    return _ok({"message-count": int32(gone)})


_OPERATIONS: dict[str, Callable[[Engine, Address, dict[str, Any]], Reply]] = {
    PEEK: _peek,
    RENEW_LOCK: _renew,
    RECEIVE_BY_SEQUENCE: _receive_by_sequence,
    UPDATE_DISPOSITION: _update_disposition,
    SCHEDULE: _schedule,
    CANCEL_SCHEDULED: _cancel,
    BATCH_DELETE: _batch_delete,
}


def to_message(reply: Reply) -> Message:
    """A reply as the message the reply link carries: `statusCode` typed AMQP int, as Service
    Bus types it (a strict client refuses a long), and the error condition when there is one."""
    app: dict[str, Any] = {"statusCode": int32(reply.status), "statusDescription": reply.description}
    if reply.condition:
        app["errorCondition"] = symbol(reply.condition)
    return Message(body=reply.body, properties=app)


def handle(engine: Engine, address: Address, operation: str, body: Any, *, holder: str | None = None) -> Reply:
    """Run one management operation; engine errors become error replies, never exceptions.

    holder: the session holder of the receiver link the request is associated with.
    """
    op = _OPERATIONS.get(operation)
    session_op = SESSION_OPERATIONS.get(operation) or RULE_OPERATIONS.get(operation)
    if op is None and session_op is None:
        return Reply(501, f"operation {operation!r} is not supported by sbdlq", condition=conditions.NOT_IMPLEMENTED)
    args = dict(body) if isinstance(body, dict) else {}
    try:
        if session_op is not None:
            status, reply_body = session_op(engine, address, args, holder)
            return Reply(status, "OK" if status == 200 else "No Content", reply_body)
        assert op is not None
        return op(engine, address, args)
    except Exception as exc:  # every failure goes back to the caller as a status code
        failure = conditions.failure_of(exc)
        return Reply(failure.status, failure.description, condition=failure.condition)
