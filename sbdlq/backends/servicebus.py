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
from dataclasses import dataclass, field
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
# Expiry in the broker's last year (DateTime.MaxValue is 9999-12-31) means "never expires".
_NEVER_YEAR = 9999
_TOPIC_HINT = "a topic has no DLQ of its own; name a subscription: TOPIC/Subscriptions/SUB"
_NAMESPACE_HOST = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"
)


@dataclass(eq=False)
class _Link:
    """A cached SDK sender or receiver, and the lock that keeps its requests one at a time.

    azure-servicebus (pyamqp) numbers an outgoing transfer before it awaits the socket and
    counts it after: two sends, or two `$management` requests (peek, renew), overlapped on
    one handler can go out with the same delivery-id, and the broker then closes the
    connection ("sequencing error"); the SDK shuts the handler down and every call sharing
    it fails. So transfers on one handler never overlap; settlements (dispositions) may.
    """

    key: Any
    handler: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    opened: bool = False


@dataclass(slots=True)
class _Held:
    """A locked SDK message, the receiver its lock token is bound to, and the AMQP link it came on."""

    receiver: _Link
    sdk_message: Any
    locked_until: datetime | None
    # The SDK's link object when the message arrived: a receiver that reopened since (after an
    # error, inside the SDK's own retries) cannot settle it, as its lock went with the old link.
    amqp_link: Any = None


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
        self._receivers: dict[tuple[str, ReceiveMode], _Link] = {}
        self._senders: dict[str, _Link] = {}
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
                # A subscription has no scheduled count of its own (they wait in the topic).
                scheduled=int(getattr(props, "scheduled_message_count", 0) or 0),
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
        # A sender link opens for a queue or a topic and fails for a missing entity; opening
        # it sends nothing.
        await self._with_sender(entity, None)
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
        link = await self._live_receiver(address, ReceiveMode.PEEK_LOCK)
        # 0 would mean "continue after the last one this receiver saw": paging must be stateless.
        start = max(1, int(from_sequence))
        async with link.lock:
            found = await self._on_receiver(link, link.handler.peek_messages(max_count, sequence_number=start), address)
        link.opened = True
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
        link = await self._live_receiver(address, mode)
        wait = max(0.05, float(max_wait_s))
        # Not under the link's lock: a receive issues no transfer, and renewals must not wait
        # behind a receive that waits for messages.
        receiving = link.handler.receive_messages(max_message_count=max_count, max_wait_time=wait)
        found = await self._on_receiver(link, receiving, address, timeout=self._timeout_s + wait)
        link.opened = True
        async with link.lock:
            await _stop_credit(link.handler)
        self._prune_held()
        locked = mode is ReceiveMode.PEEK_LOCK
        amqp_link = _amqp_link(link.handler)
        out: list[Message] = []
        for sdk_message in found:
            message = from_sdk_message(sdk_message, locked=locked, received=True)
            if locked and message.lock_token is not None:
                self._held[message.lock_token] = _Held(link, sdk_message, message.locked_until, amqp_link)
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
        """Renew the locks, one request per receiver; updates locked_until."""
        what = str(address)
        groups: dict[_Link, list[tuple[Message, _Held]]] = {}
        lost: set[int] = set()
        for message in messages:
            token = _token(message, "renew", what)
            held = self._held.get(token)
            if held is None or not self._usable(held):
                self._held.pop(token, None)
                lost.add(id(message))
            else:
                groups.setdefault(held.receiver, []).append((message, held))
        for link, items in groups.items():
            async with link.lock:
                untils = await self._renew_on(link, [held.sdk_message for _, held in items], what)
            for (message, held), until in zip(items, untils, strict=True):
                if until is None:
                    self._held.pop(str(message.lock_token), None)
                    lost.add(id(message))
                else:
                    message.locked_until = held.locked_until = until
        return [m for m in messages if id(m) in lost]

    async def _renew_on(self, link: _Link, sdk_messages: list[Any], what: str) -> list[datetime | None]:
        """New lock expiries (None: lost) of messages held on one receiver; the caller holds its lock."""
        if len(sdk_messages) > 1 and _can_renew_many(link.handler):
            try:
                return list(await self._on_receiver(link, _renew_many(link.handler, sdk_messages), what))
            except LockLost:
                pass  # one lost lock fails the whole request: renew one by one to tell them apart
        untils: list[datetime | None] = []
        for sdk_message in sdk_messages:
            try:
                untils.append(await self._on_receiver(link, link.handler.renew_message_lock(sdk_message), what))
            except LockLost:
                untils.append(None)
        return untils

    async def _settle(
        self,
        address: Address,
        messages: Sequence[Message],
        verb: str,
        action: Callable[[Any, Any], Awaitable[Any]],
    ) -> list[Message]:
        """Settle each message concurrently (dispositions may overlap); lost locks are returned, not raised."""
        what = str(address)
        tokens = [_token(m, verb, what) for m in messages]
        links: set[_Link] = set()

        async def one(token: str) -> bool:
            # Settling releases the entry whatever happens.
            held = self._held.pop(token, None)
            if held is None:
                return True  # settled already, pruned after its lock expired, or not ours
            if not self._usable(held):
                return True  # its receiver died, and the lock with it
            links.add(held.receiver)
            try:
                await action(held.receiver.handler, held.sdk_message)
            except Exception as exc:
                error = self._translate(exc, what)
                if isinstance(error, LockLost):
                    return True
                if not isinstance(error, _VERDICTS) and not self._usable(held):
                    # Not about this message: the receiver was shut down under it (by another
                    # settlement's error, say), and its lock is gone with it.
                    return True
                raise error from exc
            return False

        outcomes = await self._guard(asyncio.gather(*(one(t) for t in tokens), return_exceptions=True), what)
        for link in links:
            if not _running(link.handler):
                await self._drop(self._receivers, link)
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

    def _usable(self, held: _Held) -> bool:
        """Whether the receiver that locked a message can still settle it."""
        link = held.receiver
        return (
            self._receivers.get(link.key) is link
            and _running(link.handler)
            and _amqp_link(link.handler) is held.amqp_link
        )

    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        """Send fresh copies in as few batches as fit."""
        if entity.is_subscription:
            raise BadInput(f"cannot send to subscription {entity}", hint="send to its topic")
        if not messages:
            return
        sdk_messages = [to_sdk_message(m) for m in messages]
        await self._with_sender(entity, sdk_messages)

    async def _send_batches(self, sender: Any, sdk_messages: list[Any], what: str) -> None:
        from azure.servicebus.exceptions import MessageSizeExceededError

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

    async def _with_sender(self, entity: EntityPath, sdk_messages: list[Any] | None) -> None:
        """Open the entity's cached sender if need be, then send (None: only open), one call at a time.

        A sender the SDK shut down, or whose call was cut short, is closed and replaced, so
        no later call inherits a half-torn-down handler.
        """
        key = str(entity)
        what = _describe(entity)
        while True:
            link = self._senders.get(key)
            if link is None:
                link = self._senders[key] = _Link(key, self._new_sender(entity))
            async with link.lock:
                if self._senders.get(key) is not link:
                    continue  # replaced while we waited for it
                if _half_torn(link.handler):
                    await self._drop(self._senders, link)
                    continue
                try:
                    if not link.opened:
                        # Opening is the first batch: it attaches the link and learns its size limit.
                        await self._guard(link.handler.create_message_batch(), what)
                        link.opened = True
                    if sdk_messages is not None:
                        await self._send_batches(link.handler, sdk_messages, what)
                except BaseException as exc:
                    if _sender_broken(link.handler, exc):
                        await self._drop(self._senders, link)
                    raise
                return

    async def _on_receiver(
        self, link: _Link, awaitable: Awaitable[T], what: object, *, timeout: float | None = None
    ) -> T:
        """Await a call on a receiver; a receiver the SDK shut down is replaced (its locks went with it)."""
        try:
            return await self._guard(awaitable, str(what), timeout=timeout)
        except BaseException:
            if not _running(link.handler):
                await self._drop(self._receivers, link)
            raise

    async def _drop(self, table: dict[Any, _Link], link: _Link) -> None:
        """Forget a sender or receiver and close it (a receiver releases what it had buffered)."""
        if table.get(link.key) is link:
            del table[link.key]
            await self._quietly(link.handler.close())

    async def close(self) -> None:
        """Close receivers, senders, the clients and a credential made here."""
        links = [*self._receivers.values(), *self._senders.values()]
        self._receivers.clear()
        self._senders.clear()
        self._held.clear()
        # Together: each handler has a connection of its own, and closing one waits for the
        # broker's detach, end and close replies.
        await asyncio.gather(*(self._quietly(link.handler.close()) for link in links))
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

    async def _live_receiver(self, address: Address, mode: ReceiveMode) -> _Link:
        """The cached receiver of an address, replaced first if the SDK shut it down since it last worked."""
        link = self._receivers.get((str(address), mode))
        if link is not None and link.opened and (not _running(link.handler) or _half_torn(link.handler)):
            # Reopening it in place would serve new messages on a link its held messages
            # cannot settle on; and a handler marked running without its AMQP client fails
            # every call. Its locks are gone either way.
            await self._drop(self._receivers, link)
        return self._receiver(address, mode)

    def _receiver(self, address: Address, mode: ReceiveMode) -> _Link:
        """The cached receiver of an address: lock tokens only settle on the link that locked them."""
        key = (str(address), mode)
        link = self._receivers.get(key)
        if link is not None:
            return link
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
        link = self._receivers[key] = _Link(key, receiver)
        return link

    def _new_sender(self, entity: EntityPath) -> Any:
        try:
            # A queue sender and a topic sender differ only in name: both target the entity path.
            return self._sb_client().get_queue_sender(entity.name, socket_timeout=SOCKET_TIMEOUT_S)
        except SbdlqError:
            raise
        except Exception as exc:
            raise self._translate(exc, _describe(entity)) from exc

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


# ---------------------------------------------------------------------- SDK handlers


def _token(message: Message, verb: str, what: str) -> str:
    """A message's lock token; InvalidOperation for one that was never locked."""
    if message.lock_token is None:
        raise InvalidOperation(
            f"cannot {verb} message {message.sequence_number} of {what}: it is not locked "
            "(peeked or received and deleted)"
        )
    return message.lock_token


def _running(handler: Any) -> bool:
    """Whether an SDK sender/receiver is open (the SDK clears the flag when it shuts one down)."""
    return bool(getattr(handler, "_running", True))


def _amqp_link(handler: Any) -> Any:
    """The SDK handler's AMQP client of the moment: a new object each time the handler reopens."""
    return getattr(handler, "_handler", None)


def _half_torn(handler: Any) -> bool:
    """Whether an SDK handler is marked open but has lost its AMQP client: every call on it would fail."""
    return _running(handler) and hasattr(handler, "_handler") and handler._handler is None


def _sender_broken(sender: Any, exc: BaseException) -> bool:
    """Whether a sender must be replaced after exc: the SDK shut it down, or a send was cut short.

    A send cancelled inside its socket write may have gone out without the SDK counting its
    delivery-id, so the next one would repeat it. (Receivers are replaced only once the SDK
    shut them down: a new one would lose every lock the old one holds.)
    """
    cause = exc.__cause__ if isinstance(exc, SbdlqError) else exc
    if isinstance(exc, asyncio.CancelledError) or isinstance(cause, (TimeoutError, asyncio.CancelledError)):
        return True
    return not _running(sender)


async def _stop_credit(receiver: Any) -> None:
    """Take back the link credit a receive call left unused, so the broker locks nothing more for us."""
    # With prefetch 0 the SDK grants max_message_count for each call and leaves what was not
    # used: the broker would go on locking (and counting deliveries of) messages nobody asked
    # for, abandoned ones included, until the receiver closes. The link is pyamqp's own.
    link = getattr(_amqp_link(receiver), "_link", None)
    credit = getattr(link, "current_link_credit", None)
    if link is None or not isinstance(credit, int) or credit <= 0:
        return
    try:
        await link.flow(link_credit=0)
    except Exception:
        pass  # the next receive call sets the credit again anyway


def _can_renew_many(receiver: Any) -> bool:
    """Whether the SDK receiver has the batch form of renew_message_lock."""
    return inspect.iscoroutinefunction(getattr(receiver, "_renew_locks", None))


async def _renew_many(receiver: Any, sdk_messages: list[Any]) -> list[datetime]:
    """New lock expiries of several messages, renewed in one `$management` request."""
    # renew_message_lock sends one request per message; its private batch form (the package
    # is pinned below 8) takes every token at once: one round trip instead of hundreds.
    if not _running(receiver):
        raise ValueError("Failed to renew the locks as the handler has already been shutdown.")
    response = await receiver._renew_locks(*[m.lock_token for m in sdk_messages])
    stamps = list(response[b"expirations"])
    if len(stamps) != len(sdk_messages):
        raise ValueError(f"renew-lock answered {len(stamps)} expiries for {len(sdk_messages)} locks")
    untils = [_EPOCH + timedelta(milliseconds=int(ms)) for ms in stamps]
    for sdk_message, until in zip(sdk_messages, untils, strict=True):
        # What renew_message_lock records: the SDK refuses to settle a message whose lock it
        # believes expired, and goes by this.
        sdk_message._expiry = until
    return untils


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


def from_sdk_message(sdk: Any, *, locked: bool = True, received: bool | None = None) -> Message:
    """An SDK ServiceBusReceivedMessage as a plain Message.

    received (default: locked) says the message was delivered to us rather than peeked: its
    delivery count then includes this delivery, as sbdlq counts (.NET's DeliveryCount); the
    header, which the Python SDK shows as is, holds the earlier deliveries only.
    """
    raw = sdk.raw_amqp_message
    body, body_type = _body_of(raw)
    state = sdk.state
    token = sdk.lock_token if locked else None
    delivered = locked if received is None else received
    enqueued = sdk.enqueued_time_utc
    expires_at, ttl_s = _expiry(raw, enqueued)
    return Message(
        sequence_number=int(sdk.sequence_number or 0),
        body=body,
        enqueued_time=enqueued or _EPOCH,
        message_id=_text(sdk.message_id),
        expires_at=expires_at,
        delivery_count=int(sdk.delivery_count or 0) + (1 if delivered else 0),
        subject=_text(sdk.subject),
        correlation_id=_text(sdk.correlation_id),
        content_type=_text(sdk.content_type),
        session_id=_text(sdk.session_id),
        reply_to=_text(sdk.reply_to),
        reply_to_session_id=_text(sdk.reply_to_session_id),
        to=_text(sdk.to),
        partition_key=_text(sdk.partition_key),
        time_to_live_s=ttl_s,
        application_properties={str(_texts(k)): _texts(v) for k, v in (sdk.application_properties or {}).items()},
        dead_letter_source=_text(sdk.dead_letter_source),
        scheduled_enqueue_time=sdk.scheduled_enqueue_time_utc,
        state=_STATES.get(int(state), "active") if state is not None else "active",
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
            expires = _EPOCH + timedelta(milliseconds=int(absolute))
            start = _EPOCH + timedelta(milliseconds=int(created)) if created else enqueued
            ttl = expires - start if start is not None else None
        else:
            return None, None
    except (OverflowError, ValueError):
        return None, None  # beyond what datetime holds: never, for any practical purpose
    if expires.year >= _NEVER_YEAR or (ttl is not None and ttl.total_seconds() >= MAX_TTL_S):
        return None, None
    return expires, ttl.total_seconds() if ttl is not None else None


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
    condition = _condition_of(exc)
    said = _broker_words(detail)
    unreachable_hint = (
        f"is the emulator running (sbdlq emulator serve) on {host}?"
        if emulator
        else "check the namespace name, the network and firewalls (AMQP 5671, HTTPS 443), or raise --timeout"
    )
    if _sdk_internal(exc, condition):
        # The SDK's handler broke under the call (torn down by another call's error, a link
        # no longer attached): nothing the broker said about it; a new link may well work.
        return TransientError(f"{what}: the SDK's link to {host} was reset ({said})", hint="try again")
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
        # The broker's own words name the entity, as the emulator backend reports it.
        return EntityDisabled(said)
    if isinstance(exc, sb.ServiceBusQuotaExceededError):
        return QuotaExceeded(f"{what} is full: {detail}")
    if isinstance(exc, (sb.MessageSizeExceededError, sb.MessageAlreadySettled, sb.SessionCannotBeLockedError)):
        return InvalidOperation(f"{what}: {detail}")
    # The SDK raises a plain ServiceBusError for these: the condition tells a refusal of this
    # operation or message (dead-lettering a DLQ message, no session id for a session
    # entity) from a failure, as the emulator backend raises them.
    if condition in _REFUSED:
        return InvalidOperation(said)
    if condition in _BAD_ARGUMENT:
        return BadInput(said)
    return OperationFailed(f"{what}: {detail}")


# AMQP error conditions (azure-servicebus _common/constants.py, AMQP 1.0 §2.8.15).
_REFUSED = frozenset({"amqp:not-allowed", "amqp:not-implemented"})
_BAD_ARGUMENT = frozenset({"com.microsoft:argument-error", "com.microsoft:argument-out-of-range", "amqp:decode-error"})
# Raised by the SDK itself when its handler is no longer usable.
_CLIENT_ERROR = "amqp:client-error"
# Errors that are the broker's answer about the message or operation itself (not about the
# link that carried it).
_VERDICTS = (InvalidOperation, BadInput, MessageNotFound, EntityDisabled, QuotaExceeded, EntityNotFound, AuthError)
_SDK_SUFFIX = re.compile(r"(?:\s*Error condition: \S+?\.)?(?:\s*Status Code: \S+?\.)?\s*$")


def _condition_of(exc: BaseException) -> str | None:
    """The AMQP error condition an SDK exception carries, as text (`amqp:not-allowed`)."""
    for source in (exc, getattr(exc, "inner_exception", None)):
        raw = getattr(source, "_condition", None) or getattr(source, "condition", None)
        if raw is None:
            continue
        raw = getattr(raw, "value", raw)  # pyamqp's ErrorCondition enum holds bytes
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return None


def _broker_words(detail: str) -> str:
    """The broker's error description, without the suffixes the SDK appends to it."""
    return _SDK_SUFFIX.sub("", detail) or detail


def _sdk_internal(exc: BaseException, condition: str | None) -> bool:
    """Whether exc is the SDK failing inside its own handler rather than a broker's answer."""
    if condition == _CLIENT_ERROR:
        return True
    # "Unexpected error occurred (...). Handler shutting down.": the SDK wraps anything that
    # is not an AMQP error this way, and closes the handler; a handler already torn down
    # shows as None where its session or link was.
    inner = getattr(exc, "inner_exception", None)
    if str(exc).startswith("Handler failed:") and isinstance(inner, (AttributeError, TypeError, IndexError)):
        return True
    return isinstance(exc, AttributeError) and str(exc).startswith("'NoneType' object has no attribute")


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
