"""Backend over Azure Service Bus: azure-servicebus (aio) for AMQP, its admin client for counts.

The azure packages are imported inside functions only, so choosing another backend (or
running `sbdlq --help`) never pays for them. Every SDK error is translated at this edge by
`translate_error`; nothing above this module sees an azure exception.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.connstr import ConnectionInfo, parse_connection_string, redact
from sbdlq.errors import (
    AuthError,
    BadInput,
    EntityDisabled,
    EntityNotFound,
    InvalidOperation,
    LockLost,
    MessageNotFound,
    OperationFailed,
    QuotaExceeded,
    SbdlqError,
    ServiceUnavailable,
    TransientError,
)
from sbdlq.models import MAX_TTL_S, Counts, EntityInfo, Message, OutboundMessage
from sbdlq.paths import Address, EntityPath, SubQueue

T = TypeVar("T")

#: the Service Bus emulator serves its management (HTTP, no TLS) API on this port
ADMIN_EMULATOR_PORT = 5300
#: messages per peek request when counting without the admin endpoint
PEEK_PAGE = 250
# Past this many messages held for settlement, drop those whose lock has long expired, so an
# operation that never settles some messages cannot grow the map over a 1M-message run.
_HELD_SOFT_LIMIT = 10_000
_HELD_GRACE = timedelta(seconds=60)
# AMQP header ttl is a uint of milliseconds (about 49.7 days).
_UINT_MAX = 0xFFFFFFFF
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_STATES = {0: "active", 1: "deferred", 2: "scheduled"}
_TOPIC_HINT = "a topic has no DLQ of its own; name a subscription: TOPIC/Subscriptions/SUB"
_NAMESPACE_HOST = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"
)


@dataclass(slots=True)
class _Held:
    """A locked SDK message and the receiver (link) its lock token is bound to."""

    receiver: Any
    sdk_message: Any
    locked_until: datetime | None


class ServiceBusBackend(Backend):
    """Broker primitives over a real namespace (or Microsoft's emulator) through the azure SDK."""

    name = "servicebus"

    def __init__(
        self,
        *,
        connection_string: str | None = None,
        namespace: str | None = None,
        credential: Any | None = None,
        timeout_s: float = 30.0,
        verbose: Callable[[str], None] | None = None,
        admin_port: int | None = None,
    ) -> None:
        if (connection_string is None) == (namespace is None):
            raise BadInput("give exactly one of a connection string or a namespace")
        if not timeout_s > 0 or not math.isfinite(timeout_s):
            raise BadInput("the timeout must be a positive number of seconds")
        if connection_string is not None and credential is not None:
            raise BadInput("a credential is only used with a namespace, not with a connection string")
        self._timeout_s = float(timeout_s)
        self._verbose = verbose
        # The emulator's admin (HTTP) port: 5300 as Microsoft's, unless told otherwise.
        self._admin_port = admin_port or ADMIN_EMULATOR_PORT
        self._info: ConnectionInfo | None = None
        self._namespace: str | None = None
        if connection_string is not None:
            self._info = parse_connection_string(connection_string)
            self._emulator = self._info.use_emulator
            self._host = self._info.address if self._emulator else self._info.host
            auth = f"SAS key {self._info.key_name!r}" if self._info.key else "SAS token"
        else:
            self._namespace = normalize_namespace(namespace or "")
            self._emulator = False
            self._host = self._namespace
            auth = "DefaultAzureCredential" if credential is None else "the supplied credential"
        kind = "Service Bus emulator" if self._emulator else "Azure Service Bus"
        self.description = f"{kind} at {self._host} ({auth})"
        self._user_credential = credential
        self._credential: Any | None = None  # the async credential the AMQP client uses
        self._owned_credential: Any | None = None  # created here, so closed here
        self._client: Any | None = None
        self._admin: Any | None = None
        self._admin_pool: ThreadPoolExecutor | None = None
        self._admin_usable = True
        self._admin_error: SbdlqError | None = None
        self._said: set[str] = set()
        self._receivers: dict[tuple[str, ReceiveMode], Any] = {}
        self._senders: dict[str, Any] = {}
        self._open_senders: set[str] = set()
        self._sender_lock = asyncio.Lock()
        self._held: dict[str, _Held] = {}

    # ----------------------------------------------------------------- admin (HTTP) side

    async def list_entities(self) -> list[EntityInfo]:
        """Every queue, topic and subscription, from the admin endpoint."""
        if not self._admin_usable:
            raise self._no_admin_error(self._admin_error)

        def work(admin: Any) -> list[EntityInfo]:
            found: list[EntityInfo] = [queue_info(q) for q in admin.list_queues()]
            for topic in admin.list_topics():
                subs = list(admin.list_subscriptions(topic.name))
                found.append(topic_info(topic, len(subs)))
                found.extend(subscription_info(topic.name, s) for s in subs)
            return found

        try:
            # Listing pages through many requests, each bounded by the transport timeouts.
            return await self._admin_call(work, "the namespace's entities", timeout=math.inf)
        except SbdlqError as exc:
            if not self._admin_fallback(exc):
                raise
            self._admin_down(exc)
            raise self._no_admin_error(exc) from exc

    async def get_entity(self, entity: EntityPath) -> EntityInfo:
        """One queue, topic or subscription: admin properties, else what AMQP can tell."""
        if self._admin_usable:
            try:
                return await self._admin_get_entity(entity)
            except SbdlqError as exc:
                if not self._admin_fallback(exc):
                    raise
                self._admin_down(exc)
        return await self._amqp_get_entity(entity)

    async def counts(self, entity: EntityPath) -> Counts:
        """Runtime counts from the admin endpoint, else by paging through peek."""
        if self._admin_usable:
            try:
                result = await self._admin_counts(entity)
                self._say_once("counts: from the admin endpoint's runtime properties")
                return result
            except SbdlqError as exc:
                if not self._admin_fallback(exc):
                    raise
                self._admin_down(exc)
        self._say_once(
            "counts: by paging through peek (active, dead-letter, transfer dead-letter; "
            "scheduled from the peeked state)"
        )
        return await self._counts_by_peek(entity)

    async def _admin_counts(self, entity: EntityPath) -> Counts:
        def work(admin: Any) -> Counts:
            if entity.subscription is not None:
                props = admin.get_subscription_runtime_properties(entity.name, entity.subscription)
            else:
                try:
                    props = admin.get_queue_runtime_properties(entity.name)
                except (AttributeError, TypeError):
                    # The SDK fails this way when the name is a topic's: no queue description.
                    raise EntityNotFound(f"queue {entity.name!r} not found in {self._host}", hint=_TOPIC_HINT)
            return Counts(
                entity=str(entity),
                active=int(props.active_message_count or 0),
                dead_letter=int(props.dead_letter_message_count or 0),
                transfer_dead_letter=int(props.transfer_dead_letter_message_count or 0),
                scheduled=int(props.scheduled_message_count or 0),
            )

        hint = None if entity.is_subscription else _TOPIC_HINT
        return await self._admin_call(work, _describe(entity), hint=hint)

    async def _admin_get_entity(self, entity: EntityPath) -> EntityInfo:
        def work(admin: Any) -> EntityInfo:
            from azure.core.exceptions import ResourceNotFoundError

            if entity.subscription is not None:
                return subscription_info(entity.name, admin.get_subscription(entity.name, entity.subscription))
            try:
                return queue_info(admin.get_queue(entity.name))
            except (ResourceNotFoundError, AttributeError, TypeError):
                # Not a queue (the SDK trips on a topic's description): try it as a topic.
                pass
            topic = admin.get_topic(entity.name)
            runtime = admin.get_topic_runtime_properties(entity.name)
            return topic_info(topic, int(runtime.subscription_count or 0))

        return await self._admin_call(work, _describe(entity))

    async def _counts_by_peek(self, entity: EntityPath) -> Counts:
        result = Counts(entity=str(entity))
        for sub_queue in (SubQueue.NONE, SubQueue.DEAD_LETTER, SubQueue.TRANSFER_DEAD_LETTER):
            address = Address(entity, sub_queue)
            sequence = 1
            while True:
                page = await self.peek(address, sequence, PEEK_PAGE)
                if not page:
                    break
                for message in page:
                    if sub_queue is SubQueue.DEAD_LETTER:
                        result.dead_letter += 1
                    elif sub_queue is SubQueue.TRANSFER_DEAD_LETTER:
                        result.transfer_dead_letter += 1
                    elif message.state == "scheduled":
                        result.scheduled += 1
                    elif message.state == "active":
                        result.active += 1
                # max(): always make progress, even if a broker hands back an older message.
                sequence = max(sequence, max(m.sequence_number for m in page) + 1)
        return result

    async def _amqp_get_entity(self, entity: EntityPath) -> EntityInfo:
        """Without the admin endpoint: existence and kind from AMQP, defaults for the rest."""
        self._say_once("entity properties: admin endpoint unavailable, assuming defaults")
        if entity.subscription is not None:
            await self.peek(Address(entity, SubQueue.DEAD_LETTER), 1, 1)
            return EntityInfo(path=str(entity), kind="subscription")
        # A sender link opens for a queue or a topic and fails for a missing entity; creating
        # a batch opens it without sending anything.
        sender = self._sender(entity)
        await self._guard(sender.create_message_batch(), _describe(entity))
        try:
            await self.peek(Address(entity), 1, 1)
        except (AuthError, ServiceUnavailable):
            raise
        except SbdlqError:
            # The entity exists (the sender link opened) but refuses a receiver, even with
            # "not found": only a topic behaves like that.
            return EntityInfo(path=str(entity), kind="topic")
        return EntityInfo(path=str(entity), kind="queue")

    def _admin_fallback(self, error: SbdlqError) -> bool:
        """Whether an admin failure should send us to the AMQP-only paths."""
        if isinstance(error, EntityNotFound):
            return False
        if self._emulator:
            # The emulator may run without its HTTP management port.
            return True
        # A Listen/Send-only key (or data-plane role) cannot read the management API, but
        # can still peek.
        return isinstance(error, AuthError)

    def _admin_down(self, error: SbdlqError) -> None:
        if not self._admin_usable:
            return  # concurrent calls failing together: say it once
        self._admin_usable = False
        self._admin_error = error
        self._say(f"admin endpoint {self._admin_endpoint()} unusable ({error.line()}); using AMQP only")

    def _no_admin_error(self, cause: SbdlqError | None) -> SbdlqError:
        if isinstance(cause, AuthError):
            return cause  # a key without Manage rights: say that, not "unreachable"
        return ServiceUnavailable(
            f"cannot list entities: no admin endpoint answers at {self._admin_endpoint()}",
            hint="name the entities instead (sbdlq count QUEUE TOPIC/Subscriptions/SUB), "
            "or use a key with Manage rights",
        )

    def _admin_endpoint(self) -> str:
        if self._emulator and self._info is not None:
            host = f"[{self._info.host}]" if ":" in self._info.host else self._info.host
            return f"http://{host}:{self._admin_port}"
        return f"https://{self._info.host if self._info else self._namespace}"

    def _admin_client(self) -> Any:
        if self._admin is None:
            from azure.servicebus.management import ServiceBusAdministrationClient

            kwargs = admin_client_kwargs(self._timeout_s, emulator=self._emulator, port=self._admin_port)
            if self._info is not None:
                self._admin = ServiceBusAdministrationClient.from_connection_string(
                    sdk_connection_string(self._info), **kwargs
                )
            else:
                self._admin = ServiceBusAdministrationClient(self._host, self._sync_credential(), **kwargs)
            self._say(f"admin endpoint: {self._admin_endpoint()}")
        return self._admin

    async def _admin_call(
        self, work: Callable[[Any], T], what: str, *, timeout: float | None = None, hint: str | None = None
    ) -> T:
        """Run a blocking admin-client call in a worker thread, translated and time-bounded."""
        try:
            admin = self._admin_client()
        except SbdlqError:
            raise
        except Exception as exc:
            raise self._translate(exc, what, host=urlsplit(self._admin_endpoint()).netloc) from exc
        # The sync admin client: the aio one cannot even be imported without aiohttp, which
        # azure-core does not bring. Its own pool, not the loop's default executor: a
        # credential bridged from async may need that executor while these threads wait on it.
        if self._admin_pool is None:
            self._admin_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sbdlq-admin")
        call = asyncio.get_running_loop().run_in_executor(self._admin_pool, work, admin)
        host = urlsplit(self._admin_endpoint()).netloc
        return await self._guard(call, what, timeout=timeout, hint=hint, host=host)

    # ------------------------------------------------------------------ AMQP side

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        """Browse without locking, from a sequence number."""
        if max_count <= 0:
            return []
        receiver = self._receiver(address, ReceiveMode.PEEK_LOCK)
        # 0 would mean "continue after the last one this receiver saw": paging must be stateless.
        start = max(1, int(from_sequence))
        found = await self._guard(receiver.peek_messages(max_count, sequence_number=start), str(address))
        return [from_sdk_message(m, locked=False) for m in found]

    async def receive(
        self,
        address: Address,
        max_count: int,
        *,
        mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
        max_wait_s: float = 1.0,
    ) -> list[Message]:
        """Receive a batch; locked messages are remembered until settled."""
        if max_count <= 0:
            return []
        receiver = self._receiver(address, mode)
        wait = max(0.05, float(max_wait_s))
        found = await self._guard(
            receiver.receive_messages(max_message_count=max_count, max_wait_time=wait),
            str(address),
            timeout=self._timeout_s + wait,
        )
        self._prune_held()
        locked = mode is ReceiveMode.PEEK_LOCK
        out: list[Message] = []
        for sdk_message in found:
            message = from_sdk_message(sdk_message, locked=locked)
            if locked and message.lock_token is not None:
                self._held[message.lock_token] = _Held(receiver, sdk_message, message.locked_until)
            out.append(message)
        return out

    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Complete each message on the receiver that locked it."""
        return await self._settle(address, messages, "complete", lambda r, m: r.complete_message(m))

    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Abandon each message on the receiver that locked it."""
        return await self._settle(address, messages, "abandon", lambda r, m: r.abandon_message(m))

    async def dead_letter(
        self, address: Address, messages: Sequence[Message], reason: str, description: str
    ) -> list[Message]:
        """Dead-letter each message with a reason and description."""
        return await self._settle(
            address,
            messages,
            "dead-letter",
            lambda r, m: r.dead_letter_message(m, reason=reason, error_description=description),
        )

    async def renew_locks(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Renew each lock; updates locked_until."""
        return await self._settle(address, messages, "renew", lambda r, m: r.renew_message_lock(m), keep=True)

    async def _settle(
        self,
        address: Address,
        messages: Sequence[Message],
        verb: str,
        action: Callable[[Any, Any], Awaitable[Any]],
        *,
        keep: bool = False,
    ) -> list[Message]:
        """Run one settlement per message concurrently; lost locks are returned, not raised."""
        what = str(address)

        async def one(message: Message) -> bool:
            token = message.lock_token
            if token is None:
                raise InvalidOperation(
                    f"cannot {verb} message {message.sequence_number} of {what}: it is not locked "
                    "(peeked or received and deleted)"
                )
            # Settling releases the entry whatever happens; renewing keeps it.
            held = self._held.get(token) if keep else self._held.pop(token, None)
            if held is None:
                return True  # settled already, pruned after its lock expired, or not ours
            try:
                result = await action(held.receiver, held.sdk_message)
            except Exception as exc:
                error = self._translate(exc, what)
                if isinstance(error, LockLost):
                    self._held.pop(token, None)
                    return True
                raise error from exc
            if keep and isinstance(result, datetime):
                message.locked_until = result
                held.locked_until = result
            return False

        outcomes = await self._guard(asyncio.gather(*(one(m) for m in messages), return_exceptions=True), what)
        lost: list[Message] = []
        first_error: BaseException | None = None
        for message, outcome in zip(messages, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                first_error = first_error or outcome
            elif outcome:
                lost.append(message)
        if first_error is not None:
            raise first_error
        return lost

    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        """Send fresh copies in as few batches as fit."""
        if entity.is_subscription:
            raise BadInput(f"cannot send to subscription {entity}", hint="send to its topic")
        if not messages:
            return
        what = _describe(entity)
        sdk_messages = [to_sdk_message(m) for m in messages]
        from azure.servicebus.exceptions import MessageSizeExceededError

        sender = await self._open_sender(entity)
        batch = await self._guard(sender.create_message_batch(), what)
        for index, sdk_message in enumerate(sdk_messages):
            try:
                batch.add_message(sdk_message)
                continue
            except MessageSizeExceededError:
                if len(batch) == 0:
                    raise InvalidOperation(f"message {index + 1} is larger than {what} accepts")
            except Exception as exc:
                raise self._translate(exc, what) from exc
            await self._guard(sender.send_messages(batch), what)
            batch = await self._guard(sender.create_message_batch(), what)
            try:
                batch.add_message(sdk_message)
            except MessageSizeExceededError:
                raise InvalidOperation(f"message {index + 1} is larger than {what} accepts")
        if len(batch):
            await self._guard(sender.send_messages(batch), what)

    async def close(self) -> None:
        """Close receivers, senders, the clients and a credential made here."""
        handlers = [*self._receivers.values(), *self._senders.values()]
        self._receivers.clear()
        self._senders.clear()
        self._open_senders.clear()
        self._held.clear()
        for handler in handlers:
            await self._quietly(handler.close())
        if self._client is not None:
            await self._quietly(self._client.close())
            self._client = None
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception as exc:
                self._say(f"closing the admin client: {redact(str(exc))}")
            self._admin = None
        if self._admin_pool is not None:
            # Do not wait: a request to a dead host ends on its own transport timeout.
            self._admin_pool.shutdown(wait=False, cancel_futures=True)
            self._admin_pool = None
        if self._owned_credential is not None:
            await self._quietly(self._owned_credential.close())
            self._owned_credential = None
        self._credential = None

    # ------------------------------------------------------------------ plumbing

    def _sb_client(self) -> Any:
        if self._client is None:
            from azure.servicebus.aio import ServiceBusClient

            kwargs = amqp_client_kwargs(self._timeout_s)
            if self._info is not None:
                self._client = ServiceBusClient.from_connection_string(sdk_connection_string(self._info), **kwargs)
            else:
                self._client = ServiceBusClient(self._host, self._async_credential(), **kwargs)
        return self._client

    def _receiver(self, address: Address, mode: ReceiveMode) -> Any:
        """The cached receiver of an address: lock tokens only settle on the link that locked them."""
        key = (str(address), mode)
        receiver = self._receivers.get(key)
        if receiver is not None:
            return receiver
        try:
            from azure.servicebus import ServiceBusReceiveMode, ServiceBusSubQueue

            sub_queue = {
                SubQueue.NONE: None,
                SubQueue.DEAD_LETTER: ServiceBusSubQueue.DEAD_LETTER,
                SubQueue.TRANSFER_DEAD_LETTER: ServiceBusSubQueue.TRANSFER_DEAD_LETTER,
            }[address.sub_queue]
            sdk_mode = (
                ServiceBusReceiveMode.PEEK_LOCK
                if mode is ReceiveMode.PEEK_LOCK
                else ServiceBusReceiveMode.RECEIVE_AND_DELETE
            )
            # prefetch 0: the SDK then asks for exactly max_message_count per receive call, so
            # no message is locked (its lock ticking, its delivery count at stake) before the
            # caller asked for it; the batch size is the prefetch.
            kwargs: dict[str, Any] = {
                "sub_queue": sub_queue,
                "receive_mode": sdk_mode,
                "prefetch_count": 0,
                "socket_timeout": SOCKET_TIMEOUT_S,
            }
            client = self._sb_client()
            entity = address.entity
            if entity.subscription is None:
                receiver = client.get_queue_receiver(entity.name, **kwargs)
            else:
                receiver = client.get_subscription_receiver(entity.name, entity.subscription, **kwargs)
        except SbdlqError:
            raise
        except Exception as exc:
            raise self._translate(exc, str(address)) from exc
        self._receivers[key] = receiver
        return receiver

    async def _open_sender(self, entity: EntityPath) -> Any:
        """The cached sender, opened once: concurrent first sends on one link race inside the SDK."""
        key = str(entity)
        if key in self._open_senders:
            return self._senders[key]
        async with self._sender_lock:
            sender = self._sender(entity)
            if key not in self._open_senders:
                await self._guard(sender.create_message_batch(), _describe(entity))
                self._open_senders.add(key)
        return sender

    def _sender(self, entity: EntityPath) -> Any:
        key = str(entity)
        sender = self._senders.get(key)
        if sender is None:
            try:
                # A queue sender and a topic sender differ only in name: both target the entity path.
                sender = self._sb_client().get_queue_sender(entity.name, socket_timeout=SOCKET_TIMEOUT_S)
            except SbdlqError:
                raise
            except Exception as exc:
                raise self._translate(exc, _describe(entity)) from exc
            self._senders[key] = sender
        return sender

    def _async_credential(self) -> Any:
        if self._credential is None:
            credential = self._user_credential
            if credential is None:
                from azure.identity.aio import DefaultAzureCredential

                options: dict[str, Any] = {}
                if importlib.util.find_spec("aiohttp") is None:
                    # azure-identity's async HTTP credentials default to aiohttp, which is not
                    # a dependency: give them azure-core's requests-based async transport.
                    from azure.core.pipeline.transport import AsyncioRequestsTransport

                    options["transport"] = AsyncioRequestsTransport()
                credential = DefaultAzureCredential(**options)
                self._owned_credential = credential
            self._credential = credential if _is_async_credential(credential) else _AsyncCredential(credential)
        return self._credential

    def _sync_credential(self) -> Any:
        """A credential for the sync admin client, which calls get_token from its worker thread."""
        if self._user_credential is not None and not _is_async_credential(self._user_credential):
            return self._user_credential
        return _SyncCredential(self._async_credential(), asyncio.get_running_loop(), self._timeout_s)

    async def _guard(
        self,
        awaitable: Awaitable[T],
        what: str,
        *,
        timeout: float | None = None,
        hint: str | None = None,
        host: str | None = None,
    ) -> T:
        """Await an SDK call within the timeout, translating whatever it raises."""
        limit = self._timeout_s if timeout is None else timeout
        try:
            if math.isinf(limit):
                return await awaitable
            return await asyncio.wait_for(awaitable, limit)
        except SbdlqError:
            raise
        except Exception as exc:
            raise self._translate(exc, what, hint=hint, host=host) from exc

    def _translate(
        self, exc: BaseException, what: str, *, hint: str | None = None, host: str | None = None
    ) -> SbdlqError:
        return translate_error(
            exc, host=host or self._host, what=what, timeout_s=self._timeout_s, emulator=self._emulator, hint=hint
        )

    async def _quietly(self, awaitable: Awaitable[Any]) -> None:
        try:
            await asyncio.wait_for(awaitable, self._timeout_s)
        except Exception as exc:
            self._say(f"while closing: {redact(str(exc)) or type(exc).__name__}")

    def _prune_held(self) -> None:
        if len(self._held) <= _HELD_SOFT_LIMIT:
            return
        cutoff = datetime.now(UTC) - _HELD_GRACE
        for token in [t for t, h in self._held.items() if h.locked_until is not None and h.locked_until < cutoff]:
            del self._held[token]

    def _say(self, text: str) -> None:
        if self._verbose is not None:
            self._verbose(redact(text))

    def _say_once(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            self._say(text)


# ---------------------------------------------------------------------- credentials


def _is_async_credential(credential: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(credential, "get_token", None))


class _AsyncCredential:
    """An async face on a sync TokenCredential, for the AMQP client."""

    def __init__(self, credential: Any) -> None:
        self._credential = credential

    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        """Fetch a token in a worker thread."""
        return await asyncio.to_thread(self._credential.get_token, *scopes, **kwargs)

    async def close(self) -> None:
        """Nothing to close: the wrapped credential belongs to the caller."""


class _SyncCredential:
    """A sync face on an async credential, for the admin client's worker threads."""

    def __init__(self, credential: Any, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._credential = credential
        self._loop = loop
        self._timeout_s = timeout_s

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        """Run the async get_token on the backend's loop (never call from that loop's thread)."""
        future = asyncio.run_coroutine_threadsafe(self._credential.get_token(*scopes, **kwargs), self._loop)
        return future.result(timeout=self._timeout_s)


# ---------------------------------------------------------------------- configuration


def normalize_namespace(text: str) -> str:
    """`contoso`, `contoso.servicebus.windows.net` or `sb://contoso.../` → the host name."""
    raw = text.strip()
    if "://" in raw:
        raw = urlsplit(raw).hostname or ""
    raw = raw.strip("/").split("/")[0]
    if raw and "." not in raw:
        raw += ".servicebus.windows.net"
    if not raw or not _NAMESPACE_HOST.match(raw):
        raise BadInput(f"invalid namespace {text!r}", hint="use NAME.servicebus.windows.net (or just NAME)")
    return raw.lower()


def sdk_connection_string(info: ConnectionInfo) -> str:
    """A connection string the SDK parses the way we did (it wants `UseDevelopmentEmulator=true` lowercase)."""
    parts = [f"Endpoint={info.endpoint}"]
    if info.key:
        parts += [f"SharedAccessKeyName={info.key_name}", f"SharedAccessKey={info.key}"]
    else:
        parts.append(f"SharedAccessSignature={info.sas}")
    if info.entity_path:
        parts.append(f"EntityPath={info.entity_path}")
    if info.use_emulator:
        parts.append("UseDevelopmentEmulator=true")
    return ";".join(parts)


# Concurrent operations on one link take turns reading frames, each waiting up to this long
# after its reply was already read by another (0.2 s by default): overlapped settlements would
# pay it every time. Handlers take it per sender/receiver, not from the client.
SOCKET_TIMEOUT_S = 0.01


def amqp_client_kwargs(timeout_s: float) -> dict[str, Any]:
    """SDK retry settings under which an unreachable broker answers within timeout_s.

    Three attempts of a quarter of the budget each, plus exponential back-off of at most
    0.15 of it, leave headroom under the `asyncio.wait_for` guard around every call.
    """
    factor = min(0.8, timeout_s / 20)
    return {
        "retry_total": 2,
        "retry_backoff_factor": factor,
        "retry_backoff_max": max(2 * factor, 0.01),
        "retry_mode": "exponential",
        "try_timeout": max(timeout_s / 4, 0.05),
    }


def admin_client_kwargs(timeout_s: float, *, emulator: bool, port: int = ADMIN_EMULATOR_PORT) -> dict[str, Any]:
    """Retry policy and transport for the (sync) admin client."""
    factor = min(0.8, timeout_s / 20)
    return {
        # A local emulator without its management port refuses at once: retrying only delays
        # the fallback to peek.
        "retry_total": 0 if emulator else 2,
        "retry_backoff_factor": factor,
        "retry_backoff_max": max(2 * factor, 0.01),
        "timeout": timeout_s,
        "transport": admin_transport(timeout_s, emulator=emulator, port=port),
    }


def admin_transport(timeout_s: float, *, emulator: bool, port: int = ADMIN_EMULATOR_PORT) -> Any:
    """The admin HTTP transport: https as usual, or plain http on the emulator's port (5300)."""
    from azure.core.pipeline.transport import RequestsTransport

    options = {"connection_timeout": max(timeout_s / 4, 0.05), "read_timeout": max(timeout_s / 2, 0.05)}
    if not emulator:
        return RequestsTransport(**options)
    return _plain_http_transport_class()(port=port, **options)


def admin_http_url(url: str, port: int = ADMIN_EMULATOR_PORT) -> str:
    """The SDK's `https://host:amqp-port/...` admin URL as the emulator serves it: `http://host:5300/...`."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit(("http", f"{host}:{port}", parts.path, parts.query, parts.fragment))


@functools.cache
def _plain_http_transport_class() -> type:
    """A RequestsTransport that rewrites every URL to http on the emulator's management port."""
    from azure.core.pipeline.transport import RequestsTransport

    class PlainHttpAdminTransport(RequestsTransport):  # type: ignore[misc]
        """Admin transport for the emulator: its management API has no TLS, on its own port."""

        def __init__(self, *, port: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.admin_port = port

        def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            """Rewrite the scheme and port, then send."""
            # The admin client always builds https://<endpoint host:AMQP port>; there is no
            # option for the scheme, so the transport is the one place to change it.
            request.url = admin_http_url(request.url, self.admin_port)
            return super().send(request, **kwargs)

    return PlainHttpAdminTransport


# ---------------------------------------------------------------------- conversions


def from_sdk_message(sdk: Any, *, locked: bool = True) -> Message:
    """An SDK ServiceBusReceivedMessage as a plain Message."""
    raw = sdk.raw_amqp_message
    body, body_type = _body_of(raw)
    ttl = sdk.time_to_live
    state = sdk.state
    token = sdk.lock_token if locked else None
    return Message(
        sequence_number=int(sdk.sequence_number or 0),
        body=body,
        enqueued_time=sdk.enqueued_time_utc or _EPOCH,
        message_id=_text(sdk.message_id),
        expires_at=sdk.expires_at_utc,
        delivery_count=int(sdk.delivery_count or 0),
        subject=_text(sdk.subject),
        correlation_id=_text(sdk.correlation_id),
        content_type=_text(sdk.content_type),
        session_id=_text(sdk.session_id),
        reply_to=_text(sdk.reply_to),
        reply_to_session_id=_text(sdk.reply_to_session_id),
        to=_text(sdk.to),
        partition_key=_text(sdk.partition_key),
        time_to_live_s=ttl.total_seconds() if ttl else None,
        application_properties={str(_texts(k)): _texts(v) for k, v in (sdk.application_properties or {}).items()},
        dead_letter_source=_text(sdk.dead_letter_source),
        scheduled_enqueue_time=sdk.scheduled_enqueue_time_utc,
        state=_STATES.get(int(state), "active") if state is not None else "active",
        lock_token=str(token) if token else None,
        locked_until=sdk.locked_until_utc if token else None,
        body_type=body_type,
    )


def to_sdk_message(out: OutboundMessage) -> Any:
    """A fresh SDK message carrying everything an OutboundMessage sets."""
    from azure.servicebus import ServiceBusMessage

    ttl_ms: int | None = None
    if out.time_to_live_s is not None and 0 < out.time_to_live_s < MAX_TTL_S:
        # At least 1 ms: the SDK truncates to whole seconds, and 0 would mean "never expires".
        ttl_ms = max(1, round(out.time_to_live_s * 1000))
    try:
        message = ServiceBusMessage(
            out.body if out.body_type == "data" else b"",
            application_properties=cast(Any, dict(out.application_properties) or None),
            session_id=out.session_id,
            message_id=out.message_id,
            scheduled_enqueue_time_utc=out.scheduled_enqueue_time,
            content_type=out.content_type,
            correlation_id=out.correlation_id,
            subject=out.subject,
            partition_key=out.partition_key,
            to=out.to,
            reply_to=out.reply_to,
            reply_to_session_id=out.reply_to_session_id,
        )
    except (ValueError, TypeError) as exc:
        label = f"message {out.message_id!r}" if out.message_id else "a message"
        raise BadInput(f"cannot build {label}: {_first_line(exc)}")
    raw: Any = message.raw_amqp_message
    if ttl_ms is not None:
        _set_ttl(raw, ttl_ms)
    if out.body_type == "data":
        return message
    from azure.servicebus.amqp import AmqpAnnotatedMessage

    value, sequence = _decode_sections(out.body)
    body: dict[str, Any] = {"sequence_body": sequence} if out.body_type == "sequence" else {"value_body": value}
    return AmqpAnnotatedMessage(
        header=raw.header,
        properties=raw.properties,
        application_properties=raw.application_properties,
        annotations=raw.annotations,
        **body,
    )


def _set_ttl(raw: Any, ttl_ms: int) -> None:
    """TTL in milliseconds (the SDK's setter keeps whole seconds only)."""
    from azure.servicebus.amqp import AmqpMessageHeader, AmqpMessageProperties

    if raw.properties is None:
        raw.properties = AmqpMessageProperties()
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    raw.properties.creation_time = now_ms
    raw.properties.absolute_expiry_time = now_ms + ttl_ms
    # The header's ttl is a uint: beyond ~49.7 days the broker goes by absolute expiry
    # minus creation time alone.
    if ttl_ms <= _UINT_MAX:
        if raw.header is None:
            raw.header = AmqpMessageHeader()
        raw.header.time_to_live = ttl_ms


def _body_of(raw: Any) -> tuple[bytes, str]:
    """Body bytes and kind: data sections joined; value/sequence as their AMQP encoding."""
    from azure.servicebus.amqp import AmqpMessageBodyType

    kind = raw.body_type
    if kind == AmqpMessageBodyType.VALUE:
        return _encode_sections(value=_texts(raw.body)), "value"
    if kind == AmqpMessageBodyType.SEQUENCE:
        return _encode_sections(sequence=[_texts(s) for s in raw.body]), "sequence"
    body = raw.body
    if body is None:
        return b"", "data"
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body), "data"
    return b"".join(bytes(section) for section in body), "data"


def _encode_sections(*, value: Any = None, sequence: list[Any] | None = None) -> bytes:
    """The AMQP encoding of amqp-value / amqp-sequence sections (models.OutboundMessage.body_type)."""
    # The SDK's own encoder, so a copy is encoded the way the SDK sends it; private, but the
    # package is pinned below 8.
    from azure.servicebus._pyamqp._encode import encode_payload
    from azure.servicebus._pyamqp.message import Message as AmqpMessage

    out = bytearray()
    encode_payload(out, AmqpMessage(value=value, sequence=sequence))
    return bytes(out)


def _decode_sections(body: bytes) -> tuple[Any, list[Any] | None]:
    """The value and sequences held in encoded AMQP body sections."""
    from azure.servicebus._pyamqp._decode import decode_payload

    if not body:
        return None, None
    try:
        decoded = decode_payload(memoryview(body))
    except Exception:
        raise BadInput("a value/sequence message body is not a valid AMQP section")
    sequence = [_texts(s) for s in decoded.sequence] if decoded.sequence is not None else None
    return _texts(decoded.value), sequence


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


def _entity_name(value: Any) -> str | None:
    """`https://ns.servicebus.windows.net/orders` (as the service reports forwarding) → `orders`."""
    if not value:
        return None
    text = str(value)
    if "://" in text:
        text = urlsplit(text).path
    return text.strip("/") or None


def _status(value: Any) -> str:
    return str(getattr(value, "value", value) or "Active")


def queue_info(q: Any) -> EntityInfo:
    """EntityInfo of an SDK QueueProperties."""
    return EntityInfo(
        path=q.name,
        kind="queue",
        requires_session=bool(q.requires_session),
        requires_duplicate_detection=bool(q.requires_duplicate_detection),
        lock_duration_s=_duration_s(q.lock_duration, 60.0),
        max_delivery_count=int(q.max_delivery_count or 10),
        default_ttl_s=_duration_s(q.default_message_time_to_live, MAX_TTL_S),
        dead_lettering_on_expiration=bool(q.dead_lettering_on_message_expiration),
        forward_to=_entity_name(q.forward_to),
        forward_dead_lettered_to=_entity_name(q.forward_dead_lettered_messages_to),
        status=_status(q.status),
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
        requires_session=bool(s.requires_session),
        lock_duration_s=_duration_s(s.lock_duration, 60.0),
        max_delivery_count=int(s.max_delivery_count or 10),
        default_ttl_s=_duration_s(s.default_message_time_to_live, MAX_TTL_S),
        dead_lettering_on_expiration=bool(s.dead_lettering_on_message_expiration),
        dead_lettering_on_filter_exceptions=bool(s.dead_lettering_on_filter_evaluation_exceptions),
        forward_to=_entity_name(s.forward_to),
        forward_dead_lettered_to=_entity_name(s.forward_dead_lettered_messages_to),
        status=_status(s.status),
    )


def _describe(entity: EntityPath) -> str:
    return f"subscription {entity}" if entity.is_subscription else f"{entity!s}"


# ---------------------------------------------------------------------- errors


def translate_error(
    exc: BaseException,
    *,
    host: str,
    what: str,
    timeout_s: float,
    emulator: bool = False,
    hint: str | None = None,
) -> SbdlqError:
    """The sbdlq error for anything the SDK, azure-core or the network raised."""
    if isinstance(exc, SbdlqError):
        return exc
    from azure.core import exceptions as core
    from azure.servicebus import exceptions as sb

    detail = _first_line(exc)
    unreachable_hint = (
        f"is the emulator running (sbdlq emulator serve) on {host}?"
        if emulator
        else "check the namespace name, the network and firewalls (AMQP 5671, HTTPS 443), or raise --timeout"
    )
    if isinstance(exc, (sb.MessageLockLostError, sb.SessionLockLostError)):
        return LockLost(f"lock lost on {what}: {detail}")
    if isinstance(exc, (sb.MessagingEntityNotFoundError, core.ResourceNotFoundError)):
        return EntityNotFound(f"{what} not found in {host}", hint=hint)
    if isinstance(
        exc, (sb.ServiceBusAuthenticationError, sb.ServiceBusAuthorizationError, core.ClientAuthenticationError)
    ):
        return _auth_error(host, what, detail)
    if isinstance(exc, core.HttpResponseError):
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            return _auth_error(host, what, detail)
        if status == 404:
            return EntityNotFound(f"{what} not found in {host}", hint=hint)
        if status in (429, 503):
            return TransientError(f"{host} is busy ({status}); try again shortly")
        return OperationFailed(f"{what}: {detail}")
    if isinstance(exc, sb.ServiceBusServerBusyError):
        return TransientError(f"{host} is busy: {detail}", hint="try again shortly")
    if isinstance(
        exc,
        (
            sb.ServiceBusConnectionError,
            sb.ServiceBusCommunicationError,
            sb.OperationTimeoutError,
            core.ServiceRequestError,
            core.ServiceResponseError,
            # TimeoutError covers asyncio's and concurrent.futures'; OSError covers refused
            # connections, resets and DNS failures (socket.gaierror).
            TimeoutError,
            OSError,
        ),
    ):
        return ServiceUnavailable(f"cannot reach {host} after {timeout_s:g}s", hint=unreachable_hint)
    if isinstance(exc, sb.MessageNotFoundError):
        return MessageNotFound(f"{what}: {detail}")
    if isinstance(exc, sb.MessagingEntityDisabledError):
        return EntityDisabled(f"{what} is disabled: {detail}")
    if isinstance(exc, sb.ServiceBusQuotaExceededError):
        return QuotaExceeded(f"{what} is full: {detail}")
    if isinstance(exc, (sb.MessageSizeExceededError, sb.MessageAlreadySettled, sb.SessionCannotBeLockedError)):
        return InvalidOperation(f"{what}: {detail}")
    return OperationFailed(f"{what}: {detail}")


def _auth_error(host: str, what: str, detail: str) -> AuthError:
    return AuthError(
        f"not authorized for {what} on {host}: {detail}",
        hint="check the key name and key (Listen, Send and Manage rights as needed), or the identity's "
        "Azure Service Bus Data Owner/Receiver/Sender role; run `az login` for DefaultAzureCredential",
    )


def _first_line(exc: BaseException) -> str:
    """A redacted, single-line, bounded description of an exception."""
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else ""
    line = redact(line) or type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."
