"""Every use of a private azure-servicebus attribute, each behind one small named function.

The rest of the backend calls these and never reaches into the SDK's privates itself, so an SDK
upgrade that moves one of them breaks here, and `tests/unit/test_sdk_compat.py` (which runs each
shim against the installed SDK) says which. Each shim fails closed: a private that is missing
or answers in a shape it does not know raises Unavailable (nothing was asked of the broker) or
OutcomeUnknown (the broker may have acted: the caller recounts, never repeats blindly), and the
backend gives the shortcut up for the public SDK API (shortcuts.py, which also says on which
releases the shortcuts are taken at all). The SDK is imported inside the functions only:
importing this module costs nothing.
"""

from __future__ import annotations

import inspect
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LOGGER = logging.getLogger(__name__)

#: what a private that moved, or answers in a new shape, raises when it is read or called
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError, ImportError)


class ShortcutFailed(Exception):
    """A shortcut could not be taken; the backend gives it up (shortcuts.Shortcuts.fall_back)."""


class Unavailable(ShortcutFailed):
    """A private the shortcut needs is missing or of another shape: nothing was asked of the broker."""


class OutcomeUnknown(ShortcutFailed):
    """The shortcut failed after its request may have reached the broker: what it did is unknown."""


def handler_running(handler: Any) -> bool:
    """Whether an SDK sender/receiver is open; relies on `handler._running` (cleared at shutdown)."""
    return bool(getattr(handler, "_running", True))


def amqp_client_of(handler: Any) -> Any:
    """The handler's AMQP client of the moment (`handler._handler`): a new object each time it reopens."""
    return getattr(handler, "_handler", None)


def half_torn(handler: Any) -> bool:
    """Whether a handler is marked open (`_running`) but has lost its AMQP client (`_handler` is None)."""
    return handler_running(handler) and hasattr(handler, "_handler") and handler._handler is None


def no_retry_on_refusal(handler: Any) -> Any:
    """Make a handler's retry loop give up at once on a refused token or claim; wraps `handler._handle_exception`.

    The SDK's retry loop (`_do_retryable_operation`) hands each failure to `_handle_exception`,
    which closes the handler if need be and returns the error when it is to be retried. The SDK
    marks authentication and authorization errors retryable: a wrong key would cost the whole
    retry budget (seconds) before the user hears about it. Returns the handler.
    """
    judge = getattr(handler, "_handle_exception", None)
    if not inspect.iscoroutinefunction(judge):
        return handler
    from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusAuthorizationError

    async def judge_without_retrying_refusals(exception: Exception) -> Any:
        error = await judge(exception)
        if isinstance(error, (ServiceBusAuthenticationError, ServiceBusAuthorizationError)):
            raise error
        return error

    handler._handle_exception = judge_without_retrying_refusals
    return handler


#: how long one readiness check may keep reading the handshake's frames (see prompt_open)
READY_POLL_S = 0.5


def prompt_open(handler: Any) -> Any:
    """Let a handler's open read its handshake as fast as it arrives; wraps `handler._create_handler`.

    The SDK opens a sender or receiver by calling its AMQP client's `client_ready_async()`,
    which reads at most one frame, then sleeping 50 ms, until the link is up: the dozen-odd
    frames of the CBS handshake and the attach cost 50 ms each, whatever the distance (0.66 s
    of a receiver's 0.84 s at 70 ms round trip). The pyamqp client the handler creates gets a
    `client_ready_async` that goes on reading (each read waits at most the socket timeout)
    for up to READY_POLL_S before it answers "not yet". Once the link is up it answers at once,
    as before. Returns the handler.
    """
    create = getattr(handler, "_create_handler", None)
    if not callable(create):
        return handler

    def create_prompt_client(*args: Any, **kwargs: Any) -> Any:
        created = create(*args, **kwargs)
        client = amqp_client_of(handler)
        ready = getattr(client, "client_ready_async", None)
        if inspect.iscoroutinefunction(ready):

            async def client_ready_soon() -> bool:
                until = time.monotonic() + READY_POLL_S
                while not await ready():
                    if time.monotonic() >= until:
                        return False
                return True

            client.client_ready_async = client_ready_soon
        return created

    handler._create_handler = create_prompt_client
    return handler


async def stop_credit(receiver: Any) -> None:
    """Take back unused link credit; relies on pyamqp's link at `receiver._handler._link` and its `flow()`.

    Raises Unavailable where `flow(link_credit=0)` does not leave the credit at 0 (7.14's
    link counts it against what is already on the wire, and sends nothing): the link's
    record is put back as it was.
    """
    # With prefetch 0 the SDK grants max_message_count for each call and leaves what was not
    # used: the broker would go on locking (and counting deliveries of) messages nobody asked
    # for, abandoned ones included, until the receiver closes. The link is pyamqp's own.
    link = getattr(amqp_client_of(receiver), "_link", None)
    credit = getattr(link, "current_link_credit", None)
    if link is None or not isinstance(credit, int) or credit <= 0:
        return
    try:
        await link.flow(link_credit=0)
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"taking back link credit: {exc}") from exc
    except Exception:
        return  # the next receive call sets the credit again anyway
    if link.current_link_credit != 0:
        link.current_link_credit = credit
        raise Unavailable("taking back link credit: this SDK's flow() does not set the credit it is given")


def stop_keep_alive(handler: Any) -> None:
    """Stop the handler's keep-alive task before closing; relies on pyamqp's `client._keep_alive_thread` task.

    The task sleeps a second at a time between checks, and pyamqp's `close_async` awaits it:
    every close waited for the rest of that second (a sender a full second), after the
    run's work was done. Cancelled and forgotten, `close_async` has nothing to wait for.
    """
    client = amqp_client_of(handler)
    task = getattr(client, "_keep_alive_thread", None)
    if task is None or not hasattr(task, "cancel"):
        return
    task.cancel()
    client._keep_alive_thread = None


def can_renew_many(receiver: Any) -> bool:
    """Whether the receiver has the private batch renewal `receiver._renew_locks(*tokens)` (a coroutine)."""
    return inspect.iscoroutinefunction(getattr(receiver, "_renew_locks", None))


async def renew_many(receiver: Any, sdk_messages: list[Any]) -> list[datetime]:
    """Renew several locks in one `$management` request; relies on `_renew_locks` and sets `message._expiry`.

    Raises Unavailable when the reply or the message's lock record is of a shape it does not
    know (a renewal is harmless to repeat: the caller renews one by one the public way).
    """
    # renew_message_lock sends one request per message; its private batch form takes every
    # token at once: one round trip instead of hundreds.
    if not handler_running(receiver):
        raise ValueError("Failed to renew the locks as the handler has already been shutdown.")
    try:
        tokens = [m.lock_token for m in sdk_messages]
        renew = receiver._renew_locks
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"batch renewal: {exc}") from exc
    try:
        # A renewal changes nothing but the locks' expiry: one that failed in a shape of its own
        # (the SDK reading a reply it no longer knows) is made again the public way, one by one.
        response = await renew(*tokens)
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"batch renewal failed in a shape sbdlq does not know: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        # The SDK's own reply handler failing: 7.15 wraps it (ServiceBusError "Handler failed",
        # the shape error inside) and shuts the receiver down. Given up, so the next renewal does
        # not shut the next receiver down too; the locks of this one went with it (the caller's
        # public renewal says so, as after a reset link).
        inner = getattr(exc, "inner_exception", None)
        if isinstance(inner, SHAPE_ERRORS):
            raise Unavailable(f"batch renewal failed inside the SDK: {type(inner).__name__}: {inner}") from exc
        raise
    try:
        if not isinstance(response, dict):
            raise TypeError(f"renew-lock answered a {type(response).__name__}, not a map")
        stamps = list(response[b"expirations"])
        if len(stamps) != len(sdk_messages):
            raise ValueError(f"renew-lock answered {len(stamps)} expiries for {len(sdk_messages)} locks")
        untils = [_EPOCH + timedelta(milliseconds=int(ms)) for ms in stamps]
        for sdk_message, until in zip(sdk_messages, untils, strict=True):
            # What renew_message_lock records: the SDK refuses to settle a message whose lock it
            # believes expired, and goes by this.
            sdk_message._expiry = until
            if sdk_message.locked_until_utc != until:
                raise ValueError("the SDK no longer reads a message's lock expiry from _expiry")
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"batch renewal answered in a shape sbdlq does not know: {exc}") from exc
    return untils


def settles_runs(receiver: Any) -> bool:
    """Whether the receiver can settle (complete, abandon) a run of consecutive deliveries in one
    disposition and learn every outcome: pyamqp, peek-lock awaiting settlement outcomes, no session.

    Raises Unavailable when a private the runs need is missing (a session receiver, or one
    that does not await outcomes, simply answers False).
    """
    awaits = getattr(receiver, "_await_settlement_outcome", None)
    if awaits is None:
        raise Unavailable("settlement runs: the receiver no longer says whether it awaits outcomes")
    if getattr(receiver, "_session", None) or awaits is not True:
        return False
    try:
        handler = receiver._handler
        link = handler._link
        receiver._config.timeout  # noqa: B018 - settle_run's outcome timeout
        _settlement_errors()
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"settlement runs: {exc}") from exc
    if not inspect.iscoroutinefunction(getattr(handler, "settle_messages_async", None)) or not isinstance(
        getattr(link, "_received_delivery_tags", None), set
    ):
        raise Unavailable("settlement runs: pyamqp's settle_messages_async or its delivery tags moved")
    return True


def run_delivery_id(sdk_message: Any) -> int | None:
    """The delivery id a message can be settled by in a run; None: settle it alone (the checks
    `complete_message` makes first: settled, deferred, peeked, lock expired). Raises Unavailable
    when the message lacks a private the check reads."""
    m = sdk_message
    try:
        if m._settled or m._is_deferred_message or m._is_peeked_message or m._lock_expired:
            return None
        delivery_id, tag = m._delivery_id, m._delivery_tag
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"settlement runs: a received message has no {getattr(exc, 'name', None) or exc}") from exc
    return delivery_id if type(delivery_id) is int and tag else None


#: what settle_run may do to a run: complete it, or abandon it (the SDK's `modified`, as abandon_message sends)
RUN_OUTCOMES: dict[str, tuple[str, dict[str, bool]]] = {
    "complete": ("accepted", {}),
    "abandon": ("modified", {"delivery_failed": True, "undeliverable_here": False}),
}


async def settle_run(receiver: Any, sdk_messages: list[Any], verb: str) -> None:
    """Complete or abandon messages whose delivery ids are consecutive (in that order) with one
    disposition, awaiting every outcome. Raises when any was refused (then which went is unknown,
    settle_recovery.still_in looks, and none is settled again) or when no answer came (then each is as
    unsettled as before, to be settled alone). Raises Unavailable when a private it needs is
    missing before anything was sent, OutcomeUnknown when the disposition may have gone out but
    failed in a way the SDK of today does not fail.

    `complete_message` sends one disposition per message and awaits each: for a chunk that is a
    frame, a waiter and a read loop per message. pyamqp takes a range (`settle_messages_async`
    with a (first, last) id) and awaits every delivery in it; the link's bookkeeping of received
    tags drops only the first one, so the others are dropped here.
    """
    outcome, options = RUN_OUTCOMES[verb]
    try:
        handler = receiver._handler
        first, last = sdk_messages[0]._delivery_id, sdk_messages[-1]._delivery_id
        tags = handler._link._received_delivery_tags
        tag, timeout = sdk_messages[0]._delivery_tag, receiver._config.timeout
        settle = handler.settle_messages_async
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"settlement runs: {exc}") from exc
    if last - first + 1 != len(sdk_messages):
        raise ValueError("a run's delivery ids must be consecutive")
    refused: BaseException | None = None
    try:
        await settle((first, last), tag, outcome, **options, await_outcome=True, outcome_timeout=timeout)
    except SHAPE_ERRORS as exc:
        raise OutcomeUnknown(f"settlement run: {type(exc).__name__}: {exc}") from exc
    except BaseException as exc:
        if not run_refused(exc):
            # No answer: unsettled as far as the SDK knows, so each can be settled alone.
            tags.add(tag)
            raise
        refused = exc
    # Done with: the broker answered for each delivery (done, or refused for a lost lock).
    # Settling one again would wait out the outcome timeout for a delivery it has forgotten.
    tags.difference_update(m._delivery_tag for m in sdk_messages[1:])
    for m in sdk_messages:
        m._settled = True
    if refused is not None:
        raise refused


def _settlement_errors() -> tuple[type[BaseException], type[BaseException]]:
    """pyamqp's MessageException and MessageSettlementUnconfirmed (ImportError where they moved)."""
    from azure.servicebus._pyamqp.error import MessageException, MessageSettlementUnconfirmed

    return MessageException, MessageSettlementUnconfirmed


def transfer_rejected(inner: BaseException | None) -> bool:
    """Whether pyamqp's error under an SDK send error is the broker's rejected outcome of the
    transfer (a condition the broker sent), not a link or connection that went while it awaited
    its answer (pyamqp says those with an unknown or a client error). False where pyamqp moved."""
    try:
        from azure.servicebus._pyamqp.error import ErrorCondition, MessageException
    except ImportError:
        return False  # cannot tell: unknown, the cautious side
    if not isinstance(inner, MessageException):
        return False
    return inner.condition not in (ErrorCondition.UnknownError, ErrorCondition.ClientError)


def run_refused(exc: BaseException) -> bool:
    """Whether a settle_run failure is an outcome the broker reported (it refused some of the run,
    a lost lock say), rather than none coming back (no answer, the link gone). Raises
    OutcomeUnknown when pyamqp's error classes moved (then nobody can tell)."""
    try:
        message_exception, unconfirmed = _settlement_errors()
    except ImportError as error:
        raise OutcomeUnknown(f"settlement run: {error}") from exc
    return isinstance(exc, message_exception) and not isinstance(exc, unconfirmed)


def encode_amqp_body(*, value: Any = None, sequence: list[Any] | None = None) -> bytes:
    """amqp-value / amqp-sequence sections encoded by the SDK's own `_pyamqp._encode.encode_payload`.

    Raises Unavailable where the encoder moved (amqp_body.py is the public path) or refuses
    the value (the public path may take it: a long, say)."""
    # The SDK's encoder, so a copy is encoded the way the SDK sends it.
    try:
        from azure.servicebus._pyamqp._encode import encode_payload
        from azure.servicebus._pyamqp.message import Message as AmqpMessage

        out = bytearray()
        encode_payload(out, AmqpMessage(value=value, sequence=sequence))
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"body encoder: {type(exc).__name__}: {exc}") from exc
    return bytes(out)


def decode_amqp_body(body: bytes) -> tuple[Any, list[Any] | None]:
    """(value, sequence) of encoded body sections, by `_pyamqp._decode.decode_payload`; raises on
    bad input, and Unavailable where the decoder moved (amqp_body.py is the public path)."""
    try:
        from azure.servicebus._pyamqp._decode import decode_payload
    except ImportError as exc:
        raise Unavailable(f"body decoder: {exc}") from exc
    try:
        decoded = decode_payload(memoryview(body))
    except TypeError as exc:
        # A decoder called another way (or answering another shape); the public path decodes it,
        # and refuses a body that is bad indeed.
        raise Unavailable(f"body decoder: {exc}") from exc
    try:
        return decoded.value, decoded.sequence
    except AttributeError as exc:
        raise Unavailable(f"body decoder: {exc}") from exc


def error_condition(exc: BaseException) -> str | None:
    """The AMQP condition an SDK exception carries (`exc._condition`, or a public `condition`), as text."""
    for source in (exc, getattr(exc, "inner_exception", None)):
        raw = getattr(source, "_condition", None) or getattr(source, "condition", None)
        if raw is None:
            continue
        raw = getattr(raw, "value", raw)  # pyamqp's ErrorCondition enum holds bytes
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return None


#: the `$management` operation of server-side batch delete (.NET DeleteMessagesAsync, Java deleteMessages)
BATCH_DELETE_OPERATION = b"com.microsoft:batch-delete-messages"
#: DateTime.MaxValue (9999-12-31T23:59:59.999Z) in ms since the epoch: "enqueued before ever"
_MAX_TIMESTAMP_MS = 253_402_300_799_999


class BatchDeleteRefused(Unavailable):
    """The broker answered a batch delete with an error status: it deleted nothing."""

    def __init__(self, status_code: int, description: Any) -> None:
        super().__init__(f"batch delete refused ({status_code}): {description}")
        self.status_code = status_code


#: the condition of Service Bus's answer to a batch delete that found nothing to delete
MESSAGE_NOT_FOUND = "com.microsoft:message-not-found"


def _condition_of(message: Any) -> str | None:
    """The `errorCondition` of a management reply, as text (pyamqp gives keys and symbols as bytes)."""
    try:
        props = message.application_properties or {}
        raw = props.get(b"errorCondition", props.get("errorCondition"))
    except SHAPE_ERRORS:
        return None
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None if raw is None else str(raw)


def _batch_delete_reply(answered: list[int]) -> Any:
    """The reply callback: how many messages a reply says went (200 with `message-count`; 404
    message-not-found, or 204, for none); an error status raises the SDK's error for it. Positional,
    so a renamed keyword argument of the SDK's call does not break it; `answered` records each status."""

    def reply(status_code: Any, message: Any, description: Any = None, *_: Any, **kwargs: Any) -> int:
        answered.append(int(status_code))
        if status_code == 204 or (status_code == 404 and _condition_of(message) == MESSAGE_NOT_FOUND):
            return 0  # Service Bus answers "nothing to delete" with 404 message-not-found
        if status_code == 200:
            body = message.value
            count = body.get(b"message-count", body.get("message-count")) if isinstance(body, dict) else None
            if type(count) is not int or count < 0:
                raise ValueError(f"batch delete answered 200 without a message count: {body!r}")
            return count
        try:
            from azure.servicebus._common.constants import MGMT_RESPONSE_MESSAGE_ERROR_CONDITION

            condition = message.application_properties.get(MGMT_RESPONSE_MESSAGE_ERROR_CONDITION)
            transport = kwargs.get("amqp_transport") or next(iter(kwargs.values()))
            transport.handle_amqp_mgmt_error(_LOGGER, "Batch delete failed.", condition, description, status_code)
        except (*SHAPE_ERRORS, StopIteration):
            pass  # the SDK's own error for it moved: the status says enough
        raise BatchDeleteRefused(int(status_code), description)

    return reply


async def batch_delete(receiver: Any, max_count: int, before: datetime | None, timeout: float) -> int:
    """Delete up to max_count messages on the broker, enqueued before `before` (None: any); how many went.

    azure-servicebus 7.x has no public call for it: the request goes through the receiver's
    private `_mgmt_request_response` (the `$management` link peek and renew use), with the
    `_amqp_transport` value wrappers for the AMQP types .NET sends (int count, timestamp cutoff).
    Raises Unavailable when a private is missing before the request goes out, and
    OutcomeUnknown when the request may have reached the broker but its reply could not be
    read: then the broker may have deleted, and only a recount can tell how many.
    """
    try:
        transport = receiver._amqp_transport
        request = receiver._mgmt_request_response
        # No cutoff: .NET's DateTime.MaxValue, not the client's now, which a skewed clock would
        # put before messages the broker enqueued a moment ago.
        cutoff: datetime | int = before if before is not None else _MAX_TIMESTAMP_MS
        body = {
            "message-count": transport.AMQP_INT_VALUE(int(max_count)),
            "enqueued-time-utc": transport.AMQP_TIMESTAMP_VALUE(cutoff),
        }
    except SHAPE_ERRORS as exc:
        raise Unavailable(f"batch delete: {exc}") from exc
    if not inspect.iscoroutinefunction(request):
        raise Unavailable("batch delete: the receiver's _mgmt_request_response is not a coroutine")
    answered: list[int] = []
    try:
        gone = await request(BATCH_DELETE_OPERATION, body, _batch_delete_reply(answered), timeout=timeout)
    except SHAPE_ERRORS as exc:
        raise OutcomeUnknown(f"batch delete: {type(exc).__name__}: {exc}") from exc
    if type(gone) is not int:
        raise OutcomeUnknown(f"batch delete: the SDK returned {type(gone).__name__}, not the reply's count")
    return gone
