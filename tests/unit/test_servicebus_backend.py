"""ServiceBusBackend against mocks of the azure SDK's client classes (nothing else is faked)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace
from typing import Any, TypeVar
from unittest.mock import AsyncMock, MagicMock

import pytest
from azure.core import exceptions as core
from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus import exceptions as sb
from azure.servicebus._pyamqp.message import Header, Properties
from azure.servicebus._pyamqp.message import Message as AmqpMessage
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from pytest_mock import MockerFixture
from support import APPLICATION_PROPERTIES, full_message
from support.clock import run_virtual

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import ReceiveMode
from sbdlq.backends.servicebus import (
    ServiceBusBackend,
    admin_client_kwargs,
    admin_http_url,
    amqp_client_kwargs,
    from_sdk_message,
    normalize_namespace,
    to_sdk_message,
    translate_error,
)
from sbdlq.errors import (
    AuthError,
    BadInput,
    EntityDisabled,
    EntityNotFound,
    ExitStatus,
    InvalidOperation,
    LockLost,
    MessageNotFound,
    OperationFailed,
    QuotaExceeded,
    SbdlqError,
    SendUnconfirmed,
    ServiceUnavailable,
    TransientError,
)
from sbdlq.models import MAX_TTL_S, Message, OutboundMessage

T = TypeVar("T")

KEY = "UmVjb2duaXNhYmxlU2VjcmV0S2V5VmFsdWUwMTIzNDU2Nzg5QUJDREVG="
HOST = "contoso.servicebus.windows.net"
REAL = f"Endpoint=sb://{HOST}/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY}"
EMU = (
    "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=True;"
)
ORDERS = EntityPath("orders")
ORDERS_DLQ = Address(ORDERS, SubQueue.DEAD_LETTER)
SUB = EntityPath("events", "audit")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# ------------------------------------------------------------------ SDK fakes at the boundary


def received(
    seq: int,
    *,
    body: Any = (b"hel", b"lo"),
    body_kind: str = "data",
    state: int | None = None,
    tag: bytes | None = None,
    app: dict[str | bytes, Any] | None = None,
) -> ServiceBusReceivedMessage:
    """A real SDK ServiceBusReceivedMessage, built from the AMQP message the SDK would decode."""
    enqueued = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    annotations: dict[str | bytes, Any] = {
        b"x-opt-sequence-number": seq,
        b"x-opt-enqueued-time": int(enqueued.timestamp() * 1000),
        b"x-opt-locked-until": int((enqueued + timedelta(minutes=1)).timestamp() * 1000),
        b"x-opt-deadletter-source": b"orders",
        b"x-opt-partition-key": b"pk-1",
    }
    if state is not None:
        annotations[b"x-opt-message-state"] = state
    bodies: dict[str, Any] = {body_kind: list(body) if body_kind != "value" else body}
    message = AmqpMessage(
        header=Header(delivery_count=3, ttl=90_000),
        message_annotations=annotations,
        properties=Properties(
            message_id=b"m-1",
            to=b"dest",
            subject=b"order.created",
            reply_to=b"replies",
            correlation_id=b"c-1",
            content_type=b"application/json",
            group_id=b"s-1",
            reply_to_group_id=b"rs-1",
        ),
        application_properties=app
        if app is not None
        else {
            b"DeadLetterReason": b"MaxDeliveryCountExceeded",
            b"DeadLetterErrorDescription": b"Message could not be consumed after 10 delivery attempts.",
            b"tenant": b"acme",
            b"attempt": 7,
            b"blob": b"\xff\x00",
        },
        **bodies,
    )
    frame: Any = (None, None, tag) if tag else None  # the SDK reads the delivery tag at [2]
    return ServiceBusReceivedMessage(message, frame=frame, receiver=None)


def fake_receiver() -> MagicMock:
    receiver = MagicMock(name="receiver")
    receiver.peek_messages = AsyncMock(return_value=[])
    receiver.receive_messages = AsyncMock(return_value=[])
    receiver.complete_message = AsyncMock(return_value=None)
    receiver.abandon_message = AsyncMock(return_value=None)
    receiver.dead_letter_message = AsyncMock(return_value=None)
    receiver.renew_message_lock = AsyncMock(return_value=None)
    receiver.close = AsyncMock(return_value=None)
    return receiver


def fake_sender(max_size: int = 1024 * 1024, link_size: int | None = None) -> MagicMock:
    """A sender whose batches hold max_size bytes and whose link takes one message of link_size (default: the same)."""
    sender = MagicMock(name="sender")
    sender.create_message_batch = AsyncMock(side_effect=lambda: ServiceBusMessageBatch(max_size_in_bytes=max_size))

    async def send_messages(message: Any) -> None:
        # As the SDK checks a message sent alone against the link's maximum message size.
        if not isinstance(message, ServiceBusMessageBatch) and len(b"".join(message.body)) > (link_size or max_size):
            raise sb.MessageSizeExceededError(message="the message exceeds the link's maximum size")

    sender.send_messages = AsyncMock(side_effect=send_messages)
    sender.close = AsyncMock(return_value=None)
    return sender


@pytest.fixture
def sdk(mocker: MockerFixture) -> SimpleNamespace:
    """Patch the SDK classes the backend uses; receivers/senders are created per entity."""
    receivers: dict[tuple[Any, ...], MagicMock] = {}
    senders: dict[str, MagicMock] = {}
    client = MagicMock(name="ServiceBusClient()")
    client.close = AsyncMock(return_value=None)

    def queue_receiver(name: str, **kwargs: Any) -> MagicMock:
        return receivers.setdefault((name, kwargs.get("sub_queue"), str(kwargs.get("receive_mode"))), fake_receiver())

    def sub_receiver(topic: str, sub: str, **kwargs: Any) -> MagicMock:
        key = (f"{topic}/{sub}", kwargs.get("sub_queue"), str(kwargs.get("receive_mode")))
        return receivers.setdefault(key, fake_receiver())

    client.get_queue_receiver = MagicMock(side_effect=queue_receiver)
    client.get_subscription_receiver = MagicMock(side_effect=sub_receiver)
    client.get_queue_sender = MagicMock(side_effect=lambda name, **kw: senders.setdefault(name, fake_sender()))
    client_cls = mocker.patch("azure.servicebus.aio.ServiceBusClient")
    client_cls.from_connection_string.return_value = client
    client_cls.return_value = client
    admin = MagicMock(name="ServiceBusAdministrationClient()")
    admin_cls = mocker.patch("azure.servicebus.management.ServiceBusAdministrationClient")
    admin_cls.from_connection_string.return_value = admin
    admin_cls.return_value = admin
    return SimpleNamespace(
        client_cls=client_cls, client=client, admin_cls=admin_cls, admin=admin, receivers=receivers, senders=senders
    )


def backend(text: str = REAL, **kwargs: Any) -> ServiceBusBackend:
    return ServiceBusBackend(connection_string=text, **kwargs)


def dlq_receiver(sdk: SimpleNamespace, name: str = "orders") -> MagicMock:
    return sdk.receivers[(name, ServiceBusSubQueue.DEAD_LETTER, "ServiceBusReceiveMode.PEEK_LOCK")]


# ------------------------------------------------------------------ error mapping


ERRORS: list[tuple[Callable[[], BaseException], type[SbdlqError], int]] = [
    (lambda: sb.MessagingEntityNotFoundError(message="The messaging entity could not be found"), EntityNotFound, 4),
    (lambda: core.ResourceNotFoundError("Queue 'orders' does not exist"), EntityNotFound, 4),
    (lambda: sb.ServiceBusAuthenticationError(message="CBS Token authentication failed"), AuthError, 5),
    (lambda: sb.ServiceBusAuthorizationError(message="Unauthorized access. 'Listen' claim(s) required"), AuthError, 5),
    (lambda: core.ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token\nmore"), AuthError, 5),
    (lambda: _http_error(401), AuthError, 5),
    (lambda: _http_error(403), AuthError, 5),
    (lambda: _http_error(404), EntityNotFound, 4),
    (lambda: _http_error(503), TransientError, 6),
    (lambda: _http_error(500), OperationFailed, 1),
    (lambda: sb.ServiceBusConnectionError(message=f"Failed to connect SharedAccessKey={KEY}"), ServiceUnavailable, 6),
    (lambda: sb.ServiceBusCommunicationError(message="Unable to open a connection"), ServiceUnavailable, 6),
    (lambda: sb.OperationTimeoutError(message="Timed out waiting for the AMQP link to open."), ServiceUnavailable, 6),
    (lambda: core.ServiceRequestError("Connection refused"), ServiceUnavailable, 6),
    (lambda: core.ServiceResponseError("Connection reset"), ServiceUnavailable, 6),
    (lambda: TimeoutError(), ServiceUnavailable, 6),
    (lambda: TimeoutError(), ServiceUnavailable, 6),
    (lambda: ConnectionRefusedError(111, "Connection refused"), ServiceUnavailable, 6),
    (lambda: socket.gaierror(-2, "Name or service not known"), ServiceUnavailable, 6),
    (lambda: sb.ServiceBusServerBusyError(message="server busy"), TransientError, 6),
    (lambda: sb.MessageLockLostError(message="lock lost"), LockLost, 1),
    (lambda: sb.SessionLockLostError(message="session lock lost"), LockLost, 1),
    (lambda: sb.MessageNotFoundError(message="no such message"), MessageNotFound, 1),
    (lambda: sb.MessagingEntityDisabledError(message="disabled"), EntityDisabled, 1),
    (lambda: sb.ServiceBusQuotaExceededError(message="quota"), QuotaExceeded, 1),
    (lambda: sb.MessageSizeExceededError(message="too big"), InvalidOperation, 1),
    (lambda: sb.MessageAlreadySettled(action="complete"), InvalidOperation, 1),
    (lambda: sb.ServiceBusError(f"odd failure with SharedAccessKey={KEY} inside"), OperationFailed, 1),
    (lambda: ValueError(f"Endpoint=sb://{HOST}/;SharedAccessKey={KEY}"), OperationFailed, 1),
    (lambda: RuntimeError("boom"), OperationFailed, 1),
]


def _http_error(status: int) -> core.HttpResponseError:
    error = core.HttpResponseError(message=f"HTTP {status} Authorization: SharedAccessSignature sig={KEY}")
    error.status_code = status
    return error


@pytest.mark.parametrize(("make", "expected", "status"), ERRORS)
def test_error_mapping(make: Callable[[], BaseException], expected: type[SbdlqError], status: int) -> None:
    error = translate_error(make(), host=HOST, what="orders/$DeadLetterQueue", timeout_s=30.0)
    assert type(error) is expected
    assert error.exit_status == status
    line = error.line()
    assert KEY not in line
    assert "\n" not in line
    if isinstance(error, (EntityNotFound, AuthError, ServiceUnavailable)):
        assert HOST in line


def test_unreachable_names_host_and_budget() -> None:
    error = translate_error(sb.ServiceBusConnectionError(message="x"), host=HOST, what="orders", timeout_s=30.0)
    assert error.message == f"cannot reach {HOST} after 30s"
    emulator = translate_error(TimeoutError(), host="127.0.0.1:5672", what="q", timeout_s=5, emulator=True)
    assert "127.0.0.1:5672" in emulator.line() and "emulator" in emulator.line()


def test_sdk_error_from_a_call_is_translated_with_host_not_key(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        await b.peek(ORDERS_DLQ, 1, 1)  # creates the receiver
        dlq_receiver(sdk).peek_messages.side_effect = sb.ServiceBusConnectionError(message=f"SharedAccessKey={KEY}")
        with pytest.raises(ServiceUnavailable) as caught:
            await b.peek(ORDERS_DLQ, 1, 10)
        assert caught.value.line().startswith(f"cannot reach {HOST} after 30s")
        assert KEY not in caught.value.line()
        dlq_receiver(sdk).peek_messages.side_effect = sb.MessagingEntityNotFoundError(message="gone")
        with pytest.raises(EntityNotFound) as missing:
            await b.peek(ORDERS_DLQ, 1, 10)
        assert "orders/$DeadLetterQueue" in missing.value.line() and HOST in missing.value.line()
        await b.close()

    run(go())


def test_a_hanging_call_gives_up_after_the_timeout(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend(timeout_s=0.2)
        await b.peek(ORDERS_DLQ, 1, 1)

        async def hang(*args: Any, **kwargs: Any) -> list[Any]:
            await asyncio.sleep(30)
            return []

        dlq_receiver(sdk).peek_messages.side_effect = hang
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ServiceUnavailable) as caught:
            await b.peek(ORDERS_DLQ, 1, 10)
        # On virtual time: it gave up at its timeout, long before the hanging call would return.
        assert loop.time() - started == pytest.approx(0.2)
        assert HOST in caught.value.line()
        await b.close()

    run_virtual(go())


def test_retry_settings_fit_the_timeout() -> None:
    for timeout in (1.0, 5.0, 30.0, 120.0):
        kw = amqp_client_kwargs(timeout)
        attempts = kw["retry_total"] + 1
        backoff = sum(min(kw["retry_backoff_factor"] * 2**i, kw["retry_backoff_max"]) for i in range(kw["retry_total"]))
        assert attempts * kw["try_timeout"] + backoff < timeout
    for timeout in (1.0, 30.0):
        # The senders' one attempt: the SDK never sends a batch again (sbdlq owns send retries).
        sending = amqp_client_kwargs(timeout, sending=True)
        assert sending["retry_total"] == 0 and sending["try_timeout"] < timeout
    assert admin_client_kwargs(30, emulator=True)["retry_total"] == 0
    assert admin_client_kwargs(30, emulator=False)["timeout"] == 30


def test_clients_get_the_retry_policy_and_a_normalised_connection_string(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend(EMU, timeout_s=8)
        await b.peek(ORDERS_DLQ, 1, 1)
        (conn,), kwargs = sdk.client_cls.from_connection_string.call_args
        # The SDK only recognises a lowercase `true`.
        assert "UseDevelopmentEmulator=true" in conn and "UseDevelopmentEmulator=True" not in conn
        assert "Endpoint=sb://127.0.0.1:5672/" in conn
        assert kwargs == amqp_client_kwargs(8)
        await b.close()

    run(go())


# ------------------------------------------------------------------ construction


def test_constructor_wants_exactly_one_target() -> None:
    with pytest.raises(BadInput):
        ServiceBusBackend()
    with pytest.raises(BadInput):
        ServiceBusBackend(connection_string=REAL, namespace="contoso")
    with pytest.raises(BadInput):
        ServiceBusBackend(connection_string=REAL, credential=object())
    with pytest.raises(BadInput):
        ServiceBusBackend(connection_string=REAL, timeout_s=0)
    with pytest.raises(BadInput) as bad:
        ServiceBusBackend(connection_string=f"Endpoint=ftp://x/;SharedAccessKeyName=R;SharedAccessKey={KEY}")
    assert KEY not in bad.value.line()


def test_description_never_shows_the_key() -> None:
    b = backend()
    assert HOST in b.description and KEY not in b.description and b.name == "servicebus"
    assert "emulator" in backend(EMU).description


@pytest.mark.parametrize(
    ("text", "host"),
    [
        ("contoso", HOST),
        (HOST, HOST),
        (f"sb://{HOST}/", HOST),
        ("Contoso.ServiceBus.Windows.Net", HOST),
    ],
)
def test_namespace_forms(text: str, host: str) -> None:
    assert normalize_namespace(text) == host


def test_namespace_uses_default_azure_credential(sdk: SimpleNamespace, mocker: MockerFixture) -> None:
    credential = MagicMock(name="DefaultAzureCredential()")
    credential.get_token = AsyncMock(return_value=SimpleNamespace(token="t", expires_on=0))
    credential.close = AsyncMock(return_value=None)
    dac = mocker.patch("azure.identity.aio.DefaultAzureCredential", return_value=credential)

    async def go() -> None:
        b = ServiceBusBackend(namespace="contoso")
        await b.peek(ORDERS_DLQ, 1, 1)
        assert dac.called
        assert sdk.client_cls.call_args.args == (HOST, credential)
        # The sync admin client gets a bridge that runs the async credential on our loop.
        sdk.admin.get_queue_runtime_properties.return_value = _runtime(1, 2, 3, 4)
        await b.counts(ORDERS)
        bridge = sdk.admin_cls.call_args.args[1]
        token = await asyncio.to_thread(bridge.get_token, "https://servicebus.azure.net/.default")
        assert token.token == "t"
        await b.close()
        credential.close.assert_awaited()

    run(go())


def test_concurrent_admin_calls_with_a_bridged_credential_do_not_deadlock(
    sdk: SimpleNamespace, mocker: MockerFixture
) -> None:
    """The async credential may need the loop's default executor while admin threads wait on it."""

    async def get_token(*scopes: str, **kwargs: Any) -> SimpleNamespace:
        await asyncio.to_thread(time.sleep, 0.01)
        return SimpleNamespace(token="t", expires_on=0)

    credential = MagicMock(name="DefaultAzureCredential()")
    credential.get_token = get_token
    credential.close = AsyncMock(return_value=None)
    mocker.patch("azure.identity.aio.DefaultAzureCredential", return_value=credential)

    def runtime(name: str) -> SimpleNamespace:
        sdk.admin_cls.call_args.args[1].get_token("https://servicebus.azure.net/.default")
        return _runtime(1, 0, 0, 0)

    sdk.admin.get_queue_runtime_properties.side_effect = runtime

    async def go() -> None:
        from concurrent.futures import ThreadPoolExecutor

        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        b = ServiceBusBackend(namespace="contoso", timeout_s=5)
        results = await asyncio.gather(*(b.counts(EntityPath(f"q{i}")) for i in range(12)))
        assert [r.active for r in results] == [1] * 12
        await b.close()

    run(go())


# ------------------------------------------------------------------ cloning (send)


def test_outbound_message_is_cloned_with_every_field() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    out = full_message(
        time_to_live_s=90.5,
        scheduled_enqueue_time=when,
        application_properties={**APPLICATION_PROPERTIES, "sbdlq-resubmitted-from": "x"},
    )
    built = to_sdk_message(out)
    message = as_sent(built)
    assert isinstance(message, ServiceBusMessage)
    assert b"".join(message.body) == out.body
    assert (message.message_id, message.content_type, message.correlation_id) == ("id-7", "application/json", "corr")
    assert (message.subject, message.to, message.reply_to) == ("orders", "fulfilment", "replies")
    assert (message.reply_to_session_id, message.session_id, message.partition_key) == ("rs", "s-1", "s-1")
    assert message.time_to_live == timedelta(milliseconds=90_500)
    assert message.scheduled_enqueue_time_utc == when
    assert message.application_properties == out.application_properties
    assert message.application_properties is not out.application_properties


def as_sent(built: Any) -> ServiceBusMessage:
    """What the SDK makes of a message it is given to send (added to a batch, so encoded too)."""
    batch = ServiceBusMessageBatch(max_size_in_bytes=1024 * 1024)
    batch.add_message(built)
    return batch._messages[0]


def test_ttl_edges() -> None:
    assert as_sent(to_sdk_message(OutboundMessage(body=b"x", time_to_live_s=None))).time_to_live is None
    assert as_sent(to_sdk_message(OutboundMessage(body=b"x", time_to_live_s=MAX_TTL_S))).time_to_live is None
    short = as_sent(to_sdk_message(OutboundMessage(body=b"x", time_to_live_s=0.25)))
    assert short.time_to_live == timedelta(milliseconds=250)  # not truncated to 0 (= never expires)
    long = to_sdk_message(OutboundMessage(body=b"x", time_to_live_s=100 * 86400))
    props = long.properties
    assert props is not None and props.absolute_expiry_time is not None and props.creation_time is not None
    assert props.absolute_expiry_time - props.creation_time == 100 * 86400 * 1000
    ServiceBusMessageBatch(max_size_in_bytes=1024 * 1024).add_message(long)  # the header uint is not overflowed


def test_value_body_round_trips() -> None:
    sdk_message = received(5, body="hello", body_kind="value", tag=uuid.uuid4().bytes_le)
    message = from_sdk_message(sdk_message)
    assert message.body_type == "value"
    copy = to_sdk_message(
        OutboundMessage(body=message.body, body_type="value", subject="s", application_properties={"a": 1})
    )
    assert isinstance(copy, AmqpAnnotatedMessage)
    assert copy.body_type == AmqpMessageBodyType.VALUE and copy.body == "hello"
    assert copy.application_properties == {"a": 1}
    assert copy.properties is not None and copy.properties.subject == "s"
    sequence = from_sdk_message(received(6, body=[[1, b"x"]], body_kind="sequence"))
    assert sequence.body_type == "sequence"
    seq = to_sdk_message(OutboundMessage(body=sequence.body, body_type="sequence"))
    assert seq.body_type == AmqpMessageBodyType.SEQUENCE and list(seq.body) == [[1, "x"]]


def test_bad_outbound_message_is_bad_input() -> None:
    with pytest.raises(BadInput):
        to_sdk_message(OutboundMessage(body=b"x", session_id="a", partition_key="b"))
    for field in ("message_id", "session_id", "partition_key", "reply_to_session_id"):
        with pytest.raises(BadInput, match=field):
            to_sdk_message(OutboundMessage(body=b"x", **{field: "x" * 129}))
    # what the SDK itself refuses, so the copy fails here, not in the sender
    for field in ("message_id", "session_id", "partition_key", "reply_to_session_id"):
        with pytest.raises(ValueError):
            ServiceBusMessage(b"x", **{field: "x" * 129})


def test_a_scheduled_copy_without_an_id_gets_one_like_the_sdk_gives() -> None:
    when = datetime(2030, 1, 2, tzinfo=UTC)
    sent = as_sent(to_sdk_message(OutboundMessage(body=b"x", scheduled_enqueue_time=when)))
    assert sent.scheduled_enqueue_time_utc == when and sent.message_id and len(sent.message_id) == 36


def test_send_splits_batches_and_caches_the_sender(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        messages = [OutboundMessage(body=b"x" * 300, message_id=f"m-{i}") for i in range(10)]
        sdk.client.get_queue_sender.side_effect = lambda name, **kw: sdk.senders.setdefault(name, fake_sender(1200))
        await b.send(ORDERS, messages)
        await b.send(ORDERS, messages[:1])
        sender = sdk.senders["orders"]
        assert sdk.client.get_queue_sender.call_count == 1
        batches = [c.args[0] for c in sender.send_messages.await_args_list]
        assert len(batches) > 2
        assert sum(len(batch) for batch in batches) == 11
        await b.close()
        sender.close.assert_awaited()

    run(go())


def test_send_refuses_a_subscription_and_a_message_too_large(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        with pytest.raises(BadInput):
            await b.send(SUB, [OutboundMessage(body=b"x")])
        sdk.client.get_queue_sender.side_effect = lambda name, **kw: fake_sender(200)
        with pytest.raises(InvalidOperation):
            await b.send(ORDERS, [OutboundMessage(body=b"x" * 1000)])
        await b.close()

    run(go())


def test_a_message_larger_than_a_batch_but_within_the_link_is_sent_alone(sdk: SimpleNamespace) -> None:
    # Premium: batches hold 1 MB, the entity takes up to 100 MB.
    async def go() -> None:
        b = backend()
        premium = fake_sender(200, link_size=5000)
        sdk.client.get_queue_sender.side_effect = lambda name, **kw: sdk.senders.setdefault(name, premium)
        bodies = [b"s", b"x" * 1000, b"t"]
        await b.send(ORDERS, [OutboundMessage(body=body) for body in bodies])
        sent = [c.args[0] for c in sdk.senders["orders"].send_messages.await_args_list]
        assert [len(m) if isinstance(m, ServiceBusMessageBatch) else "alone" for m in sent] == [1, "alone", 1]
        await b.close()

    run(go())


def test_send_failure_is_translated(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        sender = fake_sender()
        sender.send_messages.side_effect = sb.ServiceBusServerBusyError(message="busy")
        sdk.client.get_queue_sender.side_effect = lambda name, **kw: sender
        with pytest.raises(TransientError):
            await b.send(ORDERS, [OutboundMessage(body=b"x")])
        await b.close()

    run(go())


def _rejected(condition: bytes) -> Exception:
    """pyamqp's error for a transfer the broker answered with a rejected outcome."""
    from azure.servicebus._pyamqp.error import MessageSendFailed

    return MessageSendFailed(condition, description="refused")


def _detached(condition: bytes) -> Exception:
    """pyamqp's error for a link the broker closed with an error."""
    from azure.servicebus._pyamqp.error import AMQPLinkError

    return AMQPLinkError(condition, description="link closed")


def _closed(condition: bytes) -> Exception:
    """pyamqp's error for a connection the broker closed with an error."""
    from azure.servicebus._pyamqp.error import AMQPConnectionError

    return AMQPConnectionError(condition, description="connection closed")


def _second_batch_fails(error: Exception) -> MagicMock:
    """A sender of 1200-byte batches whose second send_messages raises error (the first is accepted)."""
    sender = fake_sender(1200)
    calls = 0

    async def send_messages(message: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise error

    sender.send_messages.side_effect = send_messages
    return sender


@pytest.mark.parametrize(
    ("error", "unknown"),
    [
        # No answer (the connection went): the batch may be on the broker.
        (sb.ServiceBusConnectionError(message="connection reset"), True),
        (sb.OperationTimeoutError(message="timed out"), True),
        # The broker's answer: it took nothing of the batch.
        (sb.ServiceBusServerBusyError(message="busy"), False),
        (sb.ServiceBusQuotaExceededError(message="full", error=_rejected(b"amqp:resource-limit-exceeded")), False),
        (sb.MessagingEntityDisabledError(message="disabled", error=_rejected(b"com.microsoft:entity-disabled")), False),
        # The same verdicts from the link or the connection closing while the transfer awaited
        # its answer (no rejected outcome): the batch may be on the broker.
        (sb.ServiceBusQuotaExceededError(message="full"), True),
        (sb.ServiceBusAuthenticationError(message="expired", error=_detached(b"amqp:unauthorized-access")), True),
        (sb.MessagingEntityNotFoundError(message="gone", error=_detached(b"amqp:not-found")), True),
        (sb.MessagingEntityDisabledError(message="disabled", error=_closed(b"com.microsoft:entity-disabled")), True),
    ],
)
def test_a_send_that_stops_part_way_says_which_copies_went(
    sdk: SimpleNamespace, error: Exception, unknown: bool
) -> None:
    async def go() -> SendUnconfirmed:
        b = backend()
        sender = _second_batch_fails(error)
        sdk.client.get_queue_sender.side_effect = lambda name, **kw: sender
        messages = [OutboundMessage(body=b"x" * 300, message_id=f"m-{i}") for i in range(10)]
        with pytest.raises(SendUnconfirmed) as caught:
            await b.send(ORDERS, messages)
        batches = [c.args[0] for c in sender.send_messages.await_args_list]
        assert len(batches) == 2  # never sent again, and nothing after the failed batch
        assert caught.value.sent == len(batches[0])
        assert caught.value.unknown == (len(batches[1]) if unknown else 0)
        await b.close()
        return caught.value

    run(go())


@pytest.mark.parametrize(
    ("error", "unknown"),
    [
        (sb.ServiceBusConnectionError(message="connection reset"), 2),  # no answer: may be scheduled
        (sb.ServiceBusServerBusyError(message="busy"), 0),  # the broker's no: it scheduled nothing of it
    ],
)
def test_a_schedule_request_without_an_answer_is_a_send_never_repeated(
    sdk: SimpleNamespace, error: Exception, unknown: int
) -> None:
    """Scheduling goes through the no-retry senders' client; a request that fails after an earlier
    one was scheduled says which copies were (their sequence numbers) and which may have been."""
    t0 = datetime(2030, 1, 1, tzinfo=UTC)

    async def go() -> None:
        b = backend(EMU, timeout_s=8)
        first, second = fake_sender(), fake_sender()
        first.schedule_messages = AsyncMock(side_effect=[[101, 102, 103], error])
        second.schedule_messages = AsyncMock(return_value=[201])
        sdk.client.get_queue_sender.side_effect = [first, second]
        messages = [OutboundMessage(body=b"x", message_id=f"m-{i}") for i in range(5)]
        times = [t0] * 3 + [t0 + timedelta(seconds=1)] * 2
        with pytest.raises(SendUnconfirmed) as caught:
            await b.schedule(ORDERS, messages, times)
        assert first.schedule_messages.await_count == 2  # the failed request never made again
        assert (caught.value.sent, caught.value.unknown, caught.value.sequence_numbers) == (3, unknown, (101, 102, 103))
        given = [call.kwargs for call in sdk.client_cls.from_connection_string.call_args_list]
        assert given == [amqp_client_kwargs(8, sending=True)]  # the senders' client: SDK retry off
        if unknown:
            first.close.assert_awaited()  # its link may hold the unanswered request: replaced
            assert await b.schedule(ORDERS, messages[:1], [t0]) == [201]
        await b.close()

    run(go())


def test_the_senders_client_never_retries_inside_the_sdk(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend(EMU, timeout_s=8)
        await b.send(ORDERS, [OutboundMessage(body=b"x")])
        await b.peek(ORDERS_DLQ, 1, 1)
        given = [call.kwargs for call in sdk.client_cls.from_connection_string.call_args_list]
        assert amqp_client_kwargs(8, sending=True) in given and amqp_client_kwargs(8) in given
        await b.close()

    run(go())


# ------------------------------------------------------------------ receive conversion


def test_received_message_conversion(sdk: SimpleNamespace) -> None:
    tag = uuid.uuid4()

    async def go() -> list[Message]:
        b = backend()
        await b.peek(ORDERS_DLQ, 1, 1)
        dlq_receiver(sdk).receive_messages.return_value = [received(42, tag=tag.bytes_le)]
        got = await b.receive(ORDERS_DLQ, 5, max_wait_s=2.0)
        dlq_receiver(sdk).receive_messages.assert_awaited_with(max_message_count=5, max_wait_time=2.0)
        await b.close()
        return got

    (message,) = run(go())
    enqueued = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert message.sequence_number == 42
    assert message.body == b"hello" and message.body_type == "data"
    assert message.enqueued_time == enqueued
    assert message.expires_at == enqueued + timedelta(seconds=90)
    assert message.time_to_live_s == 90
    # The header counts earlier deliveries (3); a received message's count includes this one.
    assert message.delivery_count == 4
    assert message.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert message.dead_letter_error_description == "Message could not be consumed after 10 delivery attempts."
    assert message.dead_letter_source == "orders"
    assert message.lock_token == str(tag)
    assert message.locked_until == enqueued + timedelta(minutes=1)
    assert (message.message_id, message.subject, message.correlation_id) == ("m-1", "order.created", "c-1")
    assert (message.content_type, message.to, message.reply_to) == ("application/json", "dest", "replies")
    assert (message.session_id, message.reply_to_session_id, message.partition_key) == ("s-1", "rs-1", "pk-1")
    assert message.application_properties["tenant"] == "acme"
    assert message.application_properties["attempt"] == 7
    assert message.application_properties["blob"] == b"\xff\x00"
    assert message.state == "active"
    assert message.to_json()["dead_letter_reason"] == "MaxDeliveryCountExceeded"


def test_receivers_are_per_address_and_mode(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        await b.receive(ORDERS_DLQ, 1)
        await b.receive(ORDERS_DLQ, 1)
        await b.peek(ORDERS_DLQ, 1, 1)
        assert sdk.client.get_queue_receiver.call_count == 1
        kwargs = sdk.client.get_queue_receiver.call_args.kwargs
        assert kwargs["sub_queue"] == ServiceBusSubQueue.DEAD_LETTER and kwargs["prefetch_count"] == 0
        await b.receive(ORDERS_DLQ, 1, mode=ReceiveMode.RECEIVE_AND_DELETE)
        assert sdk.client.get_queue_receiver.call_count == 2
        await b.peek(Address(SUB, SubQueue.TRANSFER_DEAD_LETTER), 1, 1)
        args = sdk.client.get_subscription_receiver.call_args
        assert args.args == ("events", "audit")
        assert args.kwargs["sub_queue"] == ServiceBusSubQueue.TRANSFER_DEAD_LETTER
        await b.close()
        for receiver in sdk.receivers.values():
            receiver.close.assert_awaited()
        sdk.client.close.assert_awaited()

    run(go())


def test_peek_pages_by_sequence_number_and_never_locks(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        await b.peek(ORDERS_DLQ, 0, 1)
        receiver = dlq_receiver(sdk)
        receiver.peek_messages.return_value = [received(7, tag=uuid.uuid4().bytes_le)]
        (message,) = await b.peek(ORDERS_DLQ, 7, 20)
        receiver.peek_messages.assert_awaited_with(20, sequence_number=7)
        assert message.lock_token is None and message.locked_until is None
        # Peeked, not delivered: the earlier deliveries only, as the header says.
        assert message.delivery_count == 3
        await b.peek(ORDERS_DLQ, 0, 5)
        # 0 would make the SDK continue from its own cursor: we always send an explicit start.
        receiver.peek_messages.assert_awaited_with(5, sequence_number=1)
        await b.close()

    run(go())


# ------------------------------------------------------------------ settlement


def _receive_n(sdk: SimpleNamespace, b: ServiceBusBackend, n: int) -> Coroutine[Any, Any, list[Message]]:
    async def go() -> list[Message]:
        await b.peek(ORDERS_DLQ, 1, 1)
        dlq_receiver(sdk).receive_messages.return_value = [received(i + 1, tag=uuid.uuid4().bytes_le) for i in range(n)]
        return await b.receive(ORDERS_DLQ, n)

    return go()


def test_settlement_returns_lost_locks_instead_of_raising(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        messages = await _receive_n(sdk, b, 4)
        receiver = dlq_receiver(sdk)

        async def complete(m: Any) -> None:
            if m.sequence_number in (2, 4):
                raise sb.MessageLockLostError(message="lock expired")

        receiver.complete_message.side_effect = complete
        lost = await b.complete(ORDERS_DLQ, messages)
        assert [m.sequence_number for m in lost] == [2, 4]
        assert receiver.complete_message.await_count == 4
        # Every entry is released, settled or lost: nothing accumulates.
        assert b._held == {}
        # Settling again: the lock is no longer ours.
        assert await b.complete(ORDERS_DLQ, messages[:1]) == messages[:1]
        await b.close()

    run(go())


def test_abandon_dead_letter_and_session_lock_lost(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        messages = await _receive_n(sdk, b, 3)
        receiver = dlq_receiver(sdk)
        receiver.abandon_message.side_effect = [None, sb.SessionLockLostError(message="gone")]
        assert await b.abandon(ORDERS_DLQ, messages[:2]) == [messages[1]]
        assert await b.dead_letter(ORDERS_DLQ, messages[2:], "Bad", "really bad") == []
        receiver.dead_letter_message.assert_awaited_once()
        _, kwargs = receiver.dead_letter_message.await_args
        assert kwargs == {"reason": "Bad", "error_description": "really bad"}
        await b.close()

    run(go())


def test_renew_updates_locked_until_and_reports_lost(sdk: SimpleNamespace) -> None:
    new_until = datetime(2030, 1, 1, tzinfo=UTC)

    async def go() -> None:
        b = backend()
        messages = await _receive_n(sdk, b, 2)
        receiver = dlq_receiver(sdk)
        receiver.renew_message_lock.side_effect = [new_until, sb.MessageLockLostError(message="expired")]
        lost = await b.renew_locks(ORDERS_DLQ, messages)
        assert lost == [messages[1]]
        assert messages[0].locked_until == new_until
        # The renewed one can still be completed on its receiver.
        assert await b.complete(ORDERS_DLQ, messages[:1]) == []
        await b.close()

    run(go())


def test_settlement_raises_other_errors_after_all_finished(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        messages = await _receive_n(sdk, b, 3)
        receiver = dlq_receiver(sdk)
        receiver.complete_message.side_effect = [None, sb.ServiceBusConnectionError(message="down"), None]
        with pytest.raises(ServiceUnavailable):
            await b.complete(ORDERS_DLQ, messages)
        assert receiver.complete_message.await_count == 3
        peeked = Message(sequence_number=1, body=b"", enqueued_time=datetime.now(UTC))
        with pytest.raises(InvalidOperation):
            await b.complete(ORDERS_DLQ, [peeked])
        await b.close()

    run(go())


def test_settles_on_the_receiver_that_received(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        messages = await _receive_n(sdk, b, 1)
        dlq = dlq_receiver(sdk)
        await b.peek(Address(ORDERS), 1, 1)  # another receiver exists now
        await b.complete(Address(ORDERS), messages)  # even with a different address
        dlq.complete_message.assert_awaited_once()
        await b.close()

    run(go())


def test_many_settled_messages_do_not_accumulate(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        for _ in range(5):
            batch = await _receive_n(sdk, b, 200)
            assert await b.complete(ORDERS_DLQ, batch) == []
        assert b._held == {}
        await b.close()

    run(go())


# ------------------------------------------------------------------ counts and entities


def _runtime(active: int, dead: int, transfer: int, scheduled: int) -> SimpleNamespace:
    return SimpleNamespace(
        active_message_count=active,
        dead_letter_message_count=dead,
        transfer_dead_letter_message_count=transfer,
        scheduled_message_count=scheduled,
    )


def test_counts_from_runtime_properties(sdk: SimpleNamespace) -> None:
    said: list[str] = []

    async def go() -> None:
        b = backend(verbose=said.append)
        sdk.admin.get_queue_runtime_properties.return_value = _runtime(5, 3, 1, 2)
        sdk.admin.get_subscription_runtime_properties.return_value = _runtime(0, 9, 0, 0)
        queue = await b.counts(ORDERS)
        sub = await b.counts(SUB)
        assert queue.to_json() == {
            "entity": "orders",
            "active": 5,
            "dead_letter": 3,
            "transfer_dead_letter": 1,
            "scheduled": 2,
        }
        assert (sub.entity, sub.dead_letter) == ("events/Subscriptions/audit", 9)
        sdk.admin.get_subscription_runtime_properties.assert_called_with("events", "audit")
        (conn,), kwargs = sdk.admin_cls.from_connection_string.call_args
        assert "transport" in kwargs and "UseDevelopmentEmulator" not in conn
        await b.close()
        sdk.admin.close.assert_called()

    run(go())
    assert any("runtime properties" in line for line in said)
    assert not any(KEY in line for line in said)


def test_counts_of_missing_entity_is_not_found_with_a_topic_hint(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        sdk.admin.get_queue_runtime_properties.side_effect = core.ResourceNotFoundError("Queue 'x' does not exist")
        with pytest.raises(EntityNotFound) as caught:
            await b.counts(EntityPath("x"))
        assert caught.value.exit_status == ExitStatus.NOT_FOUND
        assert HOST in caught.value.line() and "Subscriptions" in caught.value.line()
        await b.close()

    run(go())


def test_list_entities(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        sdk.admin.list_queues.return_value = [
            SimpleNamespace(
                name="orders",
                requires_session=False,
                requires_duplicate_detection=True,
                lock_duration=timedelta(seconds=30),
                max_delivery_count=5,
                default_message_time_to_live=timedelta(days=14),
                dead_lettering_on_message_expiration=True,
                forward_to=None,
                forward_dead_lettered_messages_to=f"https://{HOST}/parking",
                status="Active",
            )
        ]
        sdk.admin.list_topics.return_value = [
            SimpleNamespace(
                name="events",
                requires_duplicate_detection=False,
                default_message_time_to_live=None,
                status=SimpleNamespace(value="Disabled"),
            )
        ]
        sdk.admin.list_subscriptions.return_value = [
            SimpleNamespace(
                name="audit",
                requires_session=True,
                lock_duration=timedelta(minutes=1),
                max_delivery_count=10,
                default_message_time_to_live=timedelta(hours=1),
                dead_lettering_on_message_expiration=False,
                dead_lettering_on_filter_evaluation_exceptions=False,
                forward_to=f"sb://{HOST}/orders",
                forward_dead_lettered_messages_to=None,
                status="Active",
            )
        ]
        queue, topic, sub = await b.list_entities()
        assert (queue.kind, queue.lock_duration_s, queue.max_delivery_count) == ("queue", 30.0, 5)
        assert queue.requires_duplicate_detection and queue.dead_lettering_on_expiration
        assert queue.forward_dead_lettered_to == "parking" and queue.default_ttl_s == 14 * 86400
        assert (topic.kind, topic.status, topic.subscription_count, topic.default_ttl_s) == (
            "topic",
            "Disabled",
            1,
            MAX_TTL_S,
        )
        assert (sub.path, sub.kind, sub.requires_session, sub.forward_to) == (
            "events/Subscriptions/audit",
            "subscription",
            True,
            "orders",
        )
        assert not sub.dead_lettering_on_filter_exceptions
        await b.close()

    run(go())


def test_get_entity_tries_queue_then_topic(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        sdk.admin.get_queue.side_effect = core.ResourceNotFoundError("Queue 'events' does not exist")
        sdk.admin.get_topic.return_value = SimpleNamespace(
            name="events", requires_duplicate_detection=True, default_message_time_to_live=None, status="Active"
        )
        sdk.admin.get_topic_runtime_properties.return_value = SimpleNamespace(subscription_count=3)
        info = await b.get_entity(EntityPath("events"))
        assert (info.kind, info.subscription_count, info.requires_duplicate_detection) == ("topic", 3, True)
        sdk.admin.get_topic.side_effect = core.ResourceNotFoundError("Topic 'events' does not exist")
        with pytest.raises(EntityNotFound):
            await b.get_entity(EntityPath("events"))
        await b.close()

    run(go())


# ------------------------------------------------------------------ emulator: http on 5300, peek fallback


def test_emulator_admin_goes_over_http_on_port_5300(sdk: SimpleNamespace, mocker: MockerFixture) -> None:
    async def go() -> None:
        b = backend(EMU)
        sdk.admin.get_queue_runtime_properties.return_value = _runtime(1, 0, 0, 0)
        await b.counts(ORDERS)
        (conn,), kwargs = sdk.admin_cls.from_connection_string.call_args
        assert "UseDevelopmentEmulator=true" in conn
        transport = kwargs["transport"]
        sent = mocker.patch("azure.core.pipeline.transport.RequestsTransport.send", return_value="response")
        request = SimpleNamespace(url="https://127.0.0.1:5672/orders?enrich=false&api-version=2021-05")
        assert transport.send(request) == "response"
        assert sent.call_args.args[0].url == "http://127.0.0.1:5300/orders?enrich=false&api-version=2021-05"
        await b.close()

    run(go())


def test_real_namespace_admin_keeps_https(sdk: SimpleNamespace, mocker: MockerFixture) -> None:
    transport = admin_client_kwargs(30, emulator=False)["transport"]
    sent = mocker.patch("azure.core.pipeline.transport.RequestsTransport.send", return_value="response")
    request = SimpleNamespace(url=f"https://{HOST}/orders")
    transport.send(request)
    assert sent.call_args.args[0].url == f"https://{HOST}/orders"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://127.0.0.1:5672/q?api-version=1", "http://127.0.0.1:5300/q?api-version=1"),
        ("https://localhost/$Resources/queues?$skip=0", "http://localhost:5300/$Resources/queues?$skip=0"),
        ("https://[::1]:5672/q", "http://[::1]:5300/q"),
    ],
)
def test_admin_http_url(url: str, expected: str) -> None:
    assert admin_http_url(url) == expected


def test_http_transport_with_the_real_admin_client() -> None:
    """The unmocked SDK admin client, through our transport, reaches a plain-http server."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    from sbdlq.backends.servicebus import plain_http_transport_class

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        transport = plain_http_transport_class()(port=port, connection_timeout=5, read_timeout=5)
        admin = ServiceBusAdministrationClient.from_connection_string(
            "Endpoint=sb://127.0.0.1:5672/;SharedAccessKeyName=R;SharedAccessKey=k;UseDevelopmentEmulator=true",
            transport=transport,
            retry_total=0,
        )
        with pytest.raises(Exception) as caught:
            admin.get_queue_runtime_properties("orders")
        error = translate_error(caught.value, host=f"127.0.0.1:{port}", what="orders", timeout_s=5)
        assert isinstance(error, AuthError)
        assert seen and seen[0].startswith("/orders?")
    finally:
        server.shutdown()


def _pages(messages: list[ServiceBusReceivedMessage]) -> Callable[..., Coroutine[Any, Any, list[Any]]]:
    async def peek(count: int, *, sequence_number: int) -> list[Any]:
        return [m for m in messages if (m.sequence_number or 0) >= sequence_number][:count]

    return peek


def test_counts_fall_back_to_peek_paging_without_an_admin_endpoint(sdk: SimpleNamespace) -> None:
    said: list[str] = []

    async def go() -> None:
        b = backend(EMU, verbose=said.append)
        sdk.admin.get_queue_runtime_properties.side_effect = core.ServiceRequestError("Connection refused")
        active = [received(i, state=2 if i % 30 == 0 else (1 if i == 7 else None)) for i in range(1, 601)]
        dead = [received(i) for i in range(1000, 1007)]
        b._receiver(Address(ORDERS), ReceiveMode.PEEK_LOCK).handler.peek_messages.side_effect = _pages(active)
        b._receiver(ORDERS_DLQ, ReceiveMode.PEEK_LOCK).handler.peek_messages.side_effect = _pages(dead)
        tdlq = b._receiver(Address(ORDERS, SubQueue.TRANSFER_DEAD_LETTER), ReceiveMode.PEEK_LOCK).handler
        counts = await b.counts(ORDERS)
        assert counts.to_json() == {
            "entity": "orders",
            "active": 600 - 20 - 1,
            "dead_letter": 7,
            "transfer_dead_letter": 0,
            "scheduled": 20,
        }
        active_peek = b._receiver(Address(ORDERS), ReceiveMode.PEEK_LOCK).handler.peek_messages
        starts = [c.kwargs["sequence_number"] for c in active_peek.await_args_list]
        assert starts == [1, 251, 501, 601]
        tdlq.peek_messages.assert_awaited_with(250, sequence_number=1)
        # Once down, the admin endpoint is not asked again.
        await b.counts(ORDERS)
        assert sdk.admin.get_queue_runtime_properties.call_count == 1
        with pytest.raises(ServiceUnavailable) as caught:
            await b.list_entities()
        assert "5300" in caught.value.line()
        await b.close()

    run(go())
    assert any("paging through peek" in line for line in said)


def test_real_namespace_unreachable_admin_does_not_fall_back(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        sdk.admin.get_queue_runtime_properties.side_effect = core.ServiceRequestError("Connection refused")
        with pytest.raises(ServiceUnavailable) as caught:
            await b.counts(ORDERS)
        assert HOST in caught.value.line() and KEY not in caught.value.line()
        assert not sdk.client.get_queue_receiver.called
        await b.close()

    run(go())


def test_real_namespace_key_without_manage_rights_falls_back_to_peek(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        sdk.admin.get_queue_runtime_properties.side_effect = _http_error(401)
        counts = await b.counts(ORDERS)
        assert counts.dead_letter == 0 and sdk.client.get_queue_receiver.called
        with pytest.raises(AuthError):
            await b.list_entities()
        await b.close()

    run(go())


def test_get_entity_without_admin_uses_amqp(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend(EMU)
        sdk.admin.get_queue.side_effect = core.ServiceRequestError("Connection refused")
        queue = await b.get_entity(ORDERS)
        assert (queue.path, queue.kind) == ("orders", "queue")
        sdk.senders["orders"].create_message_batch.assert_awaited()
        b._receiver(
            Address(EntityPath("events")), ReceiveMode.PEEK_LOCK
        ).handler.peek_messages.side_effect = sb.ServiceBusError("cannot receive from a topic")
        assert (await b.get_entity(EntityPath("events"))).kind == "topic"
        b._receiver(
            Address(EntityPath("news")), ReceiveMode.PEEK_LOCK
        ).handler.peek_messages.side_effect = sb.MessagingEntityNotFoundError(message="no receive side")
        assert (await b.get_entity(EntityPath("news"))).kind == "topic"
        assert (await b.get_entity(SUB)).kind == "subscription"
        sdk.client.get_queue_sender.side_effect = lambda name, **kw: _missing_sender()
        with pytest.raises(EntityNotFound):
            await b.get_entity(EntityPath("nope"))
        await b.close()

    run(go())


def _missing_sender() -> MagicMock:
    sender = fake_sender()
    sender.create_message_batch.side_effect = sb.MessagingEntityNotFoundError(message="not found")
    return sender


# ------------------------------------------------------------------ broker refusals, broken handlers


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (b"amqp:not-allowed", InvalidOperation),
        (b"amqp:not-implemented", InvalidOperation),
        (b"com.microsoft:argument-error", BadInput),
        (b"com.microsoft:argument-out-of-range", BadInput),
        (b"amqp:client-error", TransientError),
        (b"amqp:internal-error", OperationFailed),
    ],
)
def test_a_plain_service_bus_error_is_mapped_by_its_condition(condition: bytes, expected: type[SbdlqError]) -> None:
    text = "Cannot dead-letter a message that is already in a dead-letter queue."
    error = translate_error(sb.ServiceBusError(text, condition=condition), host=HOST, what="q", timeout_s=30)
    assert type(error) is expected
    if expected in (InvalidOperation, BadInput):
        # The broker's words, without the suffix the SDK appends (as the emulator backend says it).
        assert error.message == text


def test_a_refused_token_is_authentication_failed_not_a_reset_link() -> None:
    # What the SDK raises when $cbs answers 401: condition amqp:client-error, which alone reads
    # as the SDK's own handler failing.
    refused = sb.ServiceBusAuthenticationError(
        message=None, condition=b"amqp:client-error", error=RuntimeError("CBS Token authentication failed.")
    )
    error = translate_error(refused, host=HOST, what="orders", timeout_s=30)
    assert type(error) is AuthError and error.exit_status == ExitStatus.AUTH
    assert error.line() == f"authentication failed for {HOST} (check the key / role)"


def test_a_credential_that_gets_no_token_is_authentication_failed() -> None:
    # The SDK wraps a credential's failure while it puts the token on $cbs.
    cause = core.ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token\nmore")
    wrapped = sb.ServiceBusError(message=f"Handler failed: {cause}.", error=cause)
    for raised in (cause, wrapped):
        error = translate_error(raised, host=HOST, what="orders", timeout_s=30)
        assert type(error) is AuthError
        assert error.message == f"authentication failed for {HOST}: DefaultAzureCredential failed to retrieve a token"


def test_unauthorized_access_is_an_auth_error_whatever_the_exception_class() -> None:
    raw = sb.ServiceBusError("Unauthorized access. 'Send' claim(s) are required", condition=b"amqp:unauthorized-access")
    error = translate_error(raw, host=HOST, what="orders", timeout_s=30)
    assert type(error) is AuthError and "'Send' claim(s) are required" in error.line()


def test_entity_disabled_says_what_the_broker_said() -> None:
    raw = sb.MessagingEntityDisabledError(
        message="Messaging entity 'q' is currently disabled.", condition=b"com.microsoft:entity-disabled"
    )
    error = translate_error(raw, host=HOST, what="q", timeout_s=30)
    assert type(error) is EntityDisabled and error.message == "Messaging entity 'q' is currently disabled."


def test_a_handler_torn_down_inside_the_sdk_is_transient_not_an_attribute_error() -> None:
    torn = AttributeError("'NoneType' object has no attribute 'create_sender_link'")
    wrapped = sb.ServiceBusError(message=f"Handler failed: {torn}.", error=torn)
    for exc in (torn, wrapped):
        error = translate_error(exc, host=HOST, what="q", timeout_s=30)
        assert type(error) is TransientError and "\n" not in error.line()


def _sdk_message(*, header_ttl: int | None, absolute: int | None, created: int | None) -> ServiceBusReceivedMessage:
    enqueued = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    message = AmqpMessage(
        header=Header(delivery_count=0, ttl=header_ttl),
        message_annotations={b"x-opt-sequence-number": 1, b"x-opt-enqueued-time": int(enqueued.timestamp() * 1000)},
        properties=Properties(message_id=b"m", absolute_expiry_time=absolute, creation_time=created),
        data=[b"x"],
    )
    return ServiceBusReceivedMessage(message, receiver=None)


def test_expiry_never_long_and_short() -> None:
    enqueued_ms = int(datetime(2024, 5, 1, 12, 0, tzinfo=UTC).timestamp() * 1000)
    never = from_sdk_message(_sdk_message(header_ttl=None, absolute=None, created=None), locked=False)
    assert (never.expires_at, never.time_to_live_s) == (None, None)
    year_9999 = int(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp() * 1000)
    maxed = from_sdk_message(_sdk_message(header_ttl=None, absolute=year_9999, created=enqueued_ms), locked=False)
    assert (maxed.expires_at, maxed.time_to_live_s) == (None, None)
    # Past the header's uint of milliseconds (~49.7 days): only the absolute expiry says it.
    days_60 = 60 * 86400 * 1000
    long = from_sdk_message(_sdk_message(header_ttl=None, absolute=enqueued_ms + days_60, created=enqueued_ms))
    assert long.time_to_live_s == 60 * 86400
    assert long.expires_at == datetime(2024, 6, 30, 12, 0, tzinfo=UTC)
    short = from_sdk_message(_sdk_message(header_ttl=1500, absolute=None, created=None))
    assert short.time_to_live_s == 1.5


def test_received_and_deleted_messages_count_this_delivery(sdk: SimpleNamespace) -> None:
    async def go() -> list[Message]:
        b = backend()
        await b.receive(ORDERS_DLQ, 1, mode=ReceiveMode.RECEIVE_AND_DELETE)
        key = ("orders", ServiceBusSubQueue.DEAD_LETTER, "ServiceBusReceiveMode.RECEIVE_AND_DELETE")
        sdk.receivers[key].receive_messages.return_value = [received(1)]
        got = await b.receive(ORDERS_DLQ, 1, mode=ReceiveMode.RECEIVE_AND_DELETE)
        await b.close()
        return got

    (message,) = run(go())
    assert message.lock_token is None and message.delivery_count == 4


class _GuardedSender:
    """An SDK sender that fails when two transfers overlap on it, as pyamqp's numbering does."""

    def __init__(self, refuse: Callable[[Any], bool] = lambda batch: False) -> None:
        self._running = False
        self.busy = False
        self.refuse = refuse
        self.sent: list[int] = []
        self.closed = False

    async def create_message_batch(self) -> ServiceBusMessageBatch:
        self._running = True
        return ServiceBusMessageBatch(max_size_in_bytes=1024 * 1024)

    async def send_messages(self, batch: Any) -> None:
        assert not self.busy, "two transfers overlapped on one sender"
        self.busy = True
        try:
            await asyncio.sleep(0.01)
            if self.refuse(batch):
                self._running = False  # the SDK shuts its handler down on a refused message
                raise sb.ServiceBusError(
                    "The SessionId was not set on a message.",
                    condition=b"amqp:not-allowed",
                    error=_rejected(b"amqp:not-allowed"),  # the transfer's rejected outcome
                )
            self.sent.append(len(batch))
        finally:
            self.busy = False

    async def close(self) -> None:
        self.closed = True


def test_sends_on_one_sender_never_overlap_and_a_shut_down_sender_is_replaced(sdk: SimpleNamespace) -> None:
    senders: list[_GuardedSender] = []

    def new_sender(name: str, **kwargs: Any) -> _GuardedSender:
        # The first sender refuses its third batch; the ones after it take everything.
        calls = {"n": 0}

        def refuse(batch: Any) -> bool:
            calls["n"] += 1
            return not senders.index(sender) and calls["n"] == 3

        sender = _GuardedSender(refuse)
        senders.append(sender)
        return sender

    async def go() -> None:
        b = backend()
        sdk.client.get_queue_sender.side_effect = new_sender
        outcomes = await asyncio.gather(
            *(b.send(ORDERS, [OutboundMessage(body=b"x")]) for _ in range(6)), return_exceptions=True
        )
        assert [type(o) for o in outcomes].count(InvalidOperation) == 1
        assert [o for o in outcomes if o is not None and not isinstance(o, InvalidOperation)] == []
        assert len(senders) == 2 and senders[0].closed and not senders[1].closed
        assert sum(s.sent.count(1) for s in senders) == 5
        await b.close()
        assert senders[1].closed

    run(go())


def test_a_sender_whose_send_was_cut_short_is_replaced(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend(timeout_s=0.2)
        first = fake_sender()

        async def hang(batch: Any) -> None:
            await asyncio.sleep(30)

        first.send_messages.side_effect = hang
        second = fake_sender()
        sdk.client.get_queue_sender.side_effect = [first, second]
        # No answer within the timeout: the copy may be on the broker, and that is what it says.
        with pytest.raises(SendUnconfirmed) as caught:
            await b.send(ORDERS, [OutboundMessage(body=b"x")])
        assert (caught.value.sent, caught.value.unknown) == (0, 1)
        first.close.assert_awaited()
        await b.send(ORDERS, [OutboundMessage(body=b"x")])
        second.send_messages.assert_awaited_once()
        await b.close()

    run_virtual(go())  # the 0.2 s timeout on virtual time: a busy machine cannot trip it early


def test_renewal_is_one_request_per_receiver_and_feeds_the_sdk_lock_check(sdk: SimpleNamespace) -> None:
    new_until = datetime(2030, 1, 1, tzinfo=UTC)
    stamp = int(new_until.timestamp() * 1000)

    async def go() -> None:
        b = backend()
        messages = await _receive_n(sdk, b, 3)
        receiver = dlq_receiver(sdk)
        receiver._renew_locks = AsyncMock(return_value={b"expirations": [stamp, stamp, stamp]})
        assert await b.renew_locks(ORDERS_DLQ, messages) == []
        receiver._renew_locks.assert_awaited_once()
        assert len(receiver._renew_locks.await_args.args) == 3
        assert all(m.locked_until == new_until for m in messages)
        held = [b._held[str(m.lock_token)].sdk_message for m in messages]
        assert all(h.locked_until_utc == new_until for h in held)
        # One lost lock fails the request: then one by one, to name it.
        receiver._renew_locks.side_effect = sb.MessageLockLostError(message="expired")
        receiver.renew_message_lock.side_effect = [new_until, sb.MessageLockLostError(message="x"), new_until]
        assert await b.renew_locks(ORDERS_DLQ, messages) == [messages[1]]
        await b.close()

    run(go())


def test_receive_takes_back_the_credit_it_did_not_use(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        await b.peek(ORDERS_DLQ, 1, 1)
        receiver = dlq_receiver(sdk)
        link = receiver._handler._link
        link.current_link_credit = 7
        link.flow = AsyncMock(return_value=None)
        await b.receive(ORDERS_DLQ, 10)
        link.flow.assert_awaited_once_with(link_credit=0)
        await b.close()

    run(go())


def test_messages_of_a_receiver_that_reopened_or_died_are_lost_not_settled(sdk: SimpleNamespace) -> None:
    async def go() -> None:
        b = backend()
        messages = await _receive_n(sdk, b, 2)
        receiver = dlq_receiver(sdk)
        receiver._handler = MagicMock(name="a new AMQP link")  # the SDK reopened it after an error
        assert await b.complete(ORDERS_DLQ, messages[:1]) == messages[:1]
        receiver.complete_message.assert_not_awaited()
        again = await _receive_n(sdk, b, 1)
        receiver._running = False  # shut down by the SDK: replaced, its locks gone with it
        assert await b.renew_locks(ORDERS_DLQ, again) == again
        await b.peek(ORDERS_DLQ, 1, 1)
        receiver.close.assert_awaited()
        assert sdk.client.get_queue_receiver.call_count == 2
        await b.close()

    run(go())


# ------------------------------------------------------------------ lazy imports


@pytest.mark.parametrize("module", ["sbdlq.connstr", "sbdlq.backends.servicebus"])
def test_no_azure_import_on_start_up_paths(module: str) -> None:
    code = f"import {module}, sys; assert not any(m.startswith('azure') for m in sys.modules), sorted(sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
