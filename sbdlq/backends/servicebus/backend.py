"""ServiceBusBackend: the Backend primitives over azure-servicebus (aio), its admin client for counts.

The azure packages are imported inside functions only, so choosing another backend (or running
`sbdlq --help`) never pays for them. Every SDK error is translated at this edge (errors.py);
nothing above this package sees an azure exception. Private SDK attributes are reached only
through sdk_compat.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.backends.servicebus import sdk_compat
from sbdlq.backends.servicebus.admin_endpoint import AdminSide
from sbdlq.backends.servicebus.clients import (
    ADMIN_EMULATOR_PORT,
    SOCKET_TIMEOUT_S,
    AdminPort,
    amqp_client_kwargs,
    amqp_transport_kwargs,
    emulator_admin_port,
    normalize_namespace,
    sdk_connection_string,
)
from sbdlq.backends.servicebus.conversion import from_sdk_message, to_sdk_message
from sbdlq.backends.servicebus.credentials import (
    SyncCredential,
    as_async_credential,
    default_async_credential,
    is_async_credential,
)
from sbdlq.backends.servicebus.errors import VERDICTS, guarded, translate_error
from sbdlq.backends.servicebus.links import Held, Link, lock_token
from sbdlq.backends.servicebus.lock_renewal import LockRenewal
from sbdlq.backends.servicebus.peek_counts import counts_by_peek
from sbdlq.backends.servicebus.scheduling import Scheduling
from sbdlq.backends.servicebus.senders import Sending
from sbdlq.backends.servicebus.settlement import RunSettlement
from sbdlq.backends.servicebus.shortcuts import SdkShims, Shortcuts, sdk_version
from sbdlq.connstr import ConnectionInfo, parse_connection_string, redact
from sbdlq.errors import (
    AuthError,
    BadInput,
    EntityNotFound,
    LockLost,
    SbdlqError,
    ServiceUnavailable,
    TransientError,
)
from sbdlq.models import Counts, EntityInfo, Message, OutboundMessage, SubscriptionRule, SubscriptionRules
from sbdlq.transport import Transport

T = TypeVar("T")

# Past this many messages held for settlement, drop those whose lock has long expired, so an
# operation that never settles some messages cannot grow the map over a 1M-message run.
_HELD_SOFT_LIMIT = 10_000
_HELD_GRACE = timedelta(seconds=60)
#: messages per batch-delete request: Premium's limit, tried first; Standard's, after a refusal
BATCH_DELETE_PREMIUM = 4000
BATCH_DELETE_STANDARD = 500
#: receivers per address that browse and batch-delete side by side: the SDK numbers a handler's
#: `$management` requests so that two on one handler may not overlap (see links.Link), so
#: requests in flight at once each need a receiver (a connection) of their own
MANAGEMENT_LANES = 16


class ServiceBusBackend(Scheduling, Sending, RunSettlement, LockRenewal, Backend):
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
        transport: Transport | None = None,
        sdk_shortcuts: str | None = None,
    ) -> None:
        if (connection_string is None) == (namespace is None):
            raise BadInput("give exactly one of a connection string or a namespace")
        if not timeout_s > 0 or not math.isfinite(timeout_s):
            raise BadInput("the timeout must be a positive number of seconds")
        if connection_string is not None and credential is not None:
            raise BadInput("a credential is only used with a namespace, not with a connection string")
        self._timeout_s = float(timeout_s)
        self._verbose = verbose
        self._said: set[str] = set()
        #: which private SDK shortcuts this backend may take (sdk_shortcuts: on, off, auto; None: the env's)
        self._shortcuts = Shortcuts.resolve(sdk_shortcuts, say=self._say)
        self._sdk = SdkShims(self._shortcuts)
        self._say(f"sdk: azure-servicebus {sdk_version() or 'unknown'}, shortcuts {self._shortcuts.why}")
        self._info: ConnectionInfo | None = None
        if connection_string is not None:
            self._info = parse_connection_string(connection_string)
            self._emulator = self._info.use_emulator
            self._host = self._info.address if self._emulator else self._info.host
            auth = f"SAS key {self._info.key_name!r}" if self._info.key else "SAS token"
        else:
            self._emulator = False
            self._host = normalize_namespace(namespace or "")
            auth = "DefaultAzureCredential" if credential is None else "the supplied credential"
        kind = "Service Bus emulator" if self._emulator else "Azure Service Bus"
        self.description = f"{kind} at {self._host} ({auth})"
        self._user_credential = credential
        self._credential: Any | None = None  # the async credential the AMQP client uses
        self._owned_credential: Any | None = None  # created here, so closed here
        self._client: Any | None = None
        self._send_client: Any | None = None
        # The emulator's admin (HTTP) port: given, found where `sbdlq emulator serve` left it, or 5300.
        found = AdminPort(admin_port or ADMIN_EMULATOR_PORT)
        if self._emulator and self._info is not None:
            found = emulator_admin_port(self._info, admin_port)
        self._transport = transport
        self._admin_port = found.port
        self._admin_tls = found
        self._admin = AdminSide(
            info=self._info,
            host=self._host,
            emulator=self._emulator,
            port=found,
            proxy=transport.proxy if transport is not None else None,
            timeout_s=self._timeout_s,
            credential=self._sync_credential,
            say=self._say,
        )
        self._receivers: dict[tuple[Any, ...], Link] = {}
        self._senders: dict[str, Link] = {}
        self._held: dict[str, Held] = {}
        #: lock tokens whose settlement is on its way (a renewal leaves them out: see renew_locks)
        self._settling: set[str] = set()
        self._batch_delete_refused = False
        #: a send got no answer: the locks the next chunk acts on are proven by a renewal first
        self._wire_doubted = False
        #: wire failures so far (a sender opened before the last one is replaced before it sends)
        self._wire_failures = 0
        #: what one batch delete may take: Premium's 4,000 until the namespace refuses it
        self.delete_request_max = BATCH_DELETE_PREMIUM
        #: a run of settlements went unanswered (not refused): settle one by one from then on
        self._runs_unanswered = False

    @property
    def sdk_fallbacks(self) -> list[str]:
        """The private SDK shortcuts this backend gave up (shortcuts.Shortcuts.fallbacks)."""
        return list(self._shortcuts.fallbacks)

    # ----------------------------------------------------------------- admin (HTTP) side

    async def list_entities(self) -> list[EntityInfo]:
        """Every queue, topic and subscription, from the admin endpoint."""
        return await self._admin.list_entities()

    async def subscription_rules(self, topic: EntityPath) -> list[SubscriptionRules]:
        """A topic's subscriptions and their rules, from the admin endpoint (AMQP cannot list them)."""
        return await self._admin.subscription_rules(topic)

    async def subscription_names(self, topic: EntityPath) -> list[str]:
        return await self._admin.subscription_names(topic)

    async def rules_of(self, subscription: EntityPath) -> tuple[SubscriptionRule, ...]:
        return await self._admin.rules_of(subscription)

    async def create_rule(self, subscription: EntityPath, rule: SubscriptionRule) -> None:
        await self._admin.change_rule(subscription, rule, "create")

    async def update_rule(
        self, subscription: EntityPath, rule: SubscriptionRule, *, expected: SubscriptionRule | None = None
    ) -> None:
        await self._admin.change_rule(subscription, rule, "update", expected=expected)

    async def delete_rule(
        self, subscription: EntityPath, name: str, *, expected: SubscriptionRule | None = None
    ) -> None:
        await self._admin.change_rule(subscription, name, "delete", expected=expected)

    async def get_entity(self, entity: EntityPath) -> EntityInfo:
        """One queue, topic or subscription: admin properties, else what AMQP can tell."""
        found = await self._admin.get_entity(entity)
        return found if found is not None else await self._amqp_get_entity(entity)

    async def counts(self, entity: EntityPath) -> Counts:
        """Runtime counts from the admin endpoint, else by paging through peek."""
        result = await self._admin.counts(entity)
        if result is not None:
            self._say_once("counts: from the admin endpoint's runtime properties")
            return result
        self._say_once(
            "counts: by paging through peek (active, dead-letter, transfer dead-letter; "
            "scheduled from the peeked state)"
        )
        return await counts_by_peek(self.peek, entity)

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

    # ------------------------------------------------------------------ AMQP side

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        """Browse without locking, from a sequence number."""
        if max_count <= 0:
            return []
        link = await self._idle_receiver(address)
        # 0 would mean "continue after the last one this receiver saw": paging must be stateless.
        start = max(1, int(from_sequence))
        async with link.lock:
            found = await self._on_receiver(link, link.handler.peek_messages(max_count, sequence_number=start), address)
        link.opened = True
        return [from_sdk_message(m, locked=False, shims=self._sdk) for m in found]

    async def _receive(self, address: Address, max_count: int, mode: ReceiveMode, max_wait_s: float) -> list[Message]:
        """Receive a batch; locked messages are remembered until settled."""
        link = await self._live_receiver(address, mode)
        wait = max(0.05, float(max_wait_s))
        # Not under the link's lock: a receive issues no transfer, and renewals must not wait
        # behind a receive that waits for messages.
        receiving = link.handler.receive_messages(max_message_count=max_count, max_wait_time=wait)
        found = await self._on_receiver(link, receiving, address, timeout=self._timeout_s + wait)
        link.opened = True
        async with link.lock:
            await self._sdk.stop_credit(link.handler)
        self._prune_held()
        locked = mode is ReceiveMode.PEEK_LOCK
        amqp_link = self._sdk.client_of(link.handler)
        out: list[Message] = []
        for sdk_message in found:
            message = from_sdk_message(sdk_message, locked=locked, received=True, shims=self._sdk)
            if locked and message.lock_token is not None:
                self._held[message.lock_token] = Held(link, sdk_message, message.locked_until, amqp_link)
            out.append(message)
        return out

    async def open_links(self, address: Address, mode: ReceiveMode, target: EntityPath | None = None) -> None:
        """Attach the receiver and the target's sender together, within the timeout, before a run receives.

        In azure-servicebus a receive's wait includes attaching its link (about ten round trips):
        against a far namespace a short wait would go on the attach and look like an empty DLQ.
        """

        async def attach_receiver() -> None:
            link = await self._live_receiver(address, mode)
            if link.opened:
                return
            async with link.lock:
                await self._on_receiver(link, link.handler.__aenter__(), address)
            link.opened = True

        jobs = [attach_receiver()]
        if target is not None:
            jobs.append(self._with_sender(target, None))
        outcomes = await asyncio.gather(*jobs, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def delete_messages(self, address: Address, max_count: int, *, before: datetime | None = None) -> int | None:
        """Server-side batch delete (`$management` batch-delete-messages); None where the namespace
        refuses it or the shortcut is off. A delete whose reply cannot be read raises TransientError:
        the broker may have deleted, so the caller counts before it goes on (never a blind repeat).

        Up to `delete_request_max` per request: Premium's 4,000 first; a namespace that refuses
        that size (Standard's "Message count should be between 1 and 500") deleted nothing, so
        the request is made again once at Standard's 500, and that size is kept.
        """
        if self._batch_delete_refused or not self._shortcuts.use("batch_delete"):
            return None
        if max_count <= 0:
            return 0
        count = min(max_count, self.delete_request_max)
        try:
            return await self._batch_delete(address, count, before)
        except BadInput:
            if count <= BATCH_DELETE_STANDARD:
                return self._refuse_batch_delete("the namespace refused it")
            self.delete_request_max = BATCH_DELETE_STANDARD
            self._say(f"batch delete of {count} refused: {BATCH_DELETE_STANDARD} per request")
        try:
            return await self._batch_delete(address, min(max_count, BATCH_DELETE_STANDARD), before)
        except BadInput as exc:
            return self._refuse_batch_delete(exc.message)

    async def _batch_delete(self, address: Address, count: int, before: datetime | None) -> int | None:
        """One batch-delete request on a receiver of its own (see MANAGEMENT_LANES)."""
        link = await self._idle_receiver(address)
        try:
            async with link.lock:
                gone = await self._on_receiver(
                    link, sdk_compat.batch_delete(link.handler, count, before, self._timeout_s), address
                )
        except sdk_compat.OutcomeUnknown as exc:
            self._shortcuts.fall_back("batch_delete", exc)
            raise TransientError(f"batch delete on {address}: its outcome is unknown ({exc})", hint="count it") from exc
        except sdk_compat.Unavailable as exc:
            # Nothing was deleted: the private is missing, or the broker refused the operation.
            self._shortcuts.fall_back("batch_delete", exc)
            return None
        except (AuthError, ServiceUnavailable, EntityNotFound, BadInput):
            raise
        except SbdlqError as exc:
            # An older namespace (or broker) without the operation: receive and delete instead.
            return self._refuse_batch_delete(exc.message)
        link.opened = True
        return gone

    def _refuse_batch_delete(self, why: str) -> int | None:
        """Give batch delete up for this backend's life; None, the caller's answer then."""
        self._batch_delete_refused = True
        self._say(f"batch delete refused ({why}): deleting by receive-and-delete")
        return None

    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Complete each message on the receiver that locked it (runs in one disposition each)."""
        return await self._settle_in_runs(address, messages, "complete", lambda r, m: r.complete_message(m))

    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Abandon each message on the receiver that locked it (runs in one disposition each)."""
        return await self._settle_in_runs(address, messages, "abandon", lambda r, m: r.abandon_message(m))

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

    async def still_held(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Those whose receiver, and the AMQP link they came on, are still the live ones (no round trip).

        After a connection blip or a broker restart the SDK shuts the receiver down or opens a new
        link under it: the old link's locks went with it, so a copy of its messages must not be sent.
        """
        out: list[Message] = []
        for m in messages:
            held = self._held.get(m.lock_token or "")
            if held is not None and self._usable(held):
                out.append(m)
        if len(out) < len(messages):
            # Their receiver's link went (a blip the SDK noticed first): the senders' may have gone
            # with it unnoticed; they open again before they send (senders.py).
            self._wire_failures += 1
        if out and self._wire_doubted:
            # A send got no answer: the connection may be gone, and the receivers' with it, before
            # the SDK noticed. One renewal round trip proves which locks are still held.
            try:
                lost = {id(m) for m in await self.renew_locks(address, out)}
            except SbdlqError:
                return []
            self._wire_doubted = False
            # A renewal the SDK retried on a new link proves nothing of the old link's deliveries.
            out = [m for m in out if id(m) not in lost and self._still_usable(m)]
        return out

    def _still_usable(self, message: Message) -> bool:
        held = self._held.get(message.lock_token or "")
        return held is not None and self._usable(held)

    async def _settle(
        self,
        address: Address,
        messages: Sequence[Message],
        verb: str,
        action: Callable[[Any, Any], Awaitable[Any]],
    ) -> list[Message]:
        """Settle each message concurrently (dispositions may overlap); lost locks are returned, not raised."""
        what = str(address)
        tokens = [lock_token(m, verb, what) for m in messages]
        links: set[Link] = set()

        async def one(token: str) -> bool:
            # Settling releases the entry whatever happens.
            held = self._held.pop(token, None)
            if held is None:
                return True  # settled already, pruned after its lock expired, or not ours
            if not self._usable(held):
                return True  # its receiver died, and the lock with it
            links.add(held.receiver)
            try:
                async with held.receiver.settling:
                    await action(held.receiver.handler, held.sdk_message)
            except Exception as exc:
                error = self._translate(exc, what)
                if isinstance(error, LockLost):
                    return True
                if not isinstance(error, VERDICTS) and not self._usable(held):
                    # Not about this message: the receiver was shut down under it (by another
                    # settlement's error, say), and its lock is gone with it.
                    return True
                raise error from exc
            return False

        outcomes = await self._guard(asyncio.gather(*(one(t) for t in tokens), return_exceptions=True), what)
        for link in links:
            if not self._sdk.running(link.handler):
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

    def _usable(self, held: Held) -> bool:
        """Whether the receiver that locked a message can still settle it."""
        link = held.receiver
        return (
            self._receivers.get(link.key) is link
            and self._sdk.running(link.handler)
            and self._sdk.client_of(link.handler) is held.amqp_link
        )

    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        """Send fresh copies in as few batches as fit."""
        if entity.is_subscription:
            raise BadInput(f"cannot send to subscription {entity}", hint="send to its topic")
        if not messages:
            return
        sdk_messages = [to_sdk_message(m, self._sdk) for m in messages]
        await self._with_sender(entity, lambda sender, what: self._send_batches(sender, sdk_messages, what))

    async def _on_receiver(
        self, link: Link, awaitable: Awaitable[T], what: object, *, timeout: float | None = None
    ) -> T:
        """Await a call on a receiver; a receiver the SDK shut down is replaced (its locks went with it)."""
        try:
            return await self._guard(awaitable, str(what), timeout=timeout)
        except BaseException:
            if not self._sdk.running(link.handler):
                await self._drop(self._receivers, link)
            raise

    async def _drop(self, table: dict[Any, Link], link: Link) -> None:
        """Forget a sender or receiver and close it (a receiver releases what it had buffered)."""
        if table.get(link.key) is link:
            del table[link.key]
            self._sdk.stop_keep_alive(link.handler)
            await self._quietly(link.handler.close())

    async def close(self) -> None:
        """Close receivers, senders, the clients and a credential made here."""
        links = [*self._receivers.values(), *self._senders.values()]
        self._receivers.clear()
        self._senders.clear()
        self._held.clear()
        # Together: each handler has a connection of its own, and closing one waits for the
        # broker's detach, end and close replies.
        for link in links:
            self._sdk.stop_keep_alive(link.handler)
        await asyncio.gather(*(self._quietly(link.handler.close()) for link in links))
        for client in (self._client, self._send_client):
            if client is not None:
                await self._quietly(client.close())
        self._client = self._send_client = None
        self._admin.close()
        if self._owned_credential is not None:
            await self._quietly(self._owned_credential.close())
            self._owned_credential = None
        self._credential = None

    # ------------------------------------------------------------------ plumbing

    def _sb_client(self) -> Any:
        """The client of receivers (and of peeks, renewals and settlements): the SDK retries its calls."""
        if self._client is None:
            self._client = self._new_client(sending=False)
        return self._client

    def _sending_client(self) -> Any:
        """The client of senders: the SDK never retries a send (see clients.amqp_client_kwargs)."""
        if self._send_client is None:
            self._send_client = self._new_client(sending=True)
        return self._send_client

    def _new_client(self, *, sending: bool) -> Any:
        from azure.servicebus.aio import ServiceBusClient

        kwargs = amqp_client_kwargs(self._timeout_s, sending=sending)
        transport_kwargs = amqp_transport_kwargs(
            self._transport, emulator=self._emulator, host=self._host, admin_port=self._admin_port
        )
        kwargs |= transport_kwargs
        if self._info is None:
            return ServiceBusClient(self._host, self._async_credential(), **kwargs)
        info = self._info
        if "custom_endpoint_address" in kwargs and self._admin_tls.https:
            # WebSockets to `serve --tls`: its HTTP port speaks wss, which the SDK dials only
            # without UseDevelopmentEmulator (that flag means "no TLS"), trusting the server's CA.
            info = dataclasses.replace(info, use_emulator=False)
            if self._admin_tls.ca is not None:
                kwargs["connection_verify"] = self._admin_tls.ca
        return ServiceBusClient.from_connection_string(sdk_connection_string(info), **kwargs)

    async def _live_receiver(self, address: Address, mode: ReceiveMode, lane: int = 0) -> Link:
        """The cached receiver of an address, replaced first if the SDK shut it down since it last worked."""
        link = self._receivers.get(self._receiver_key(address, mode, lane))
        if (
            link is not None
            and link.opened
            and (not self._sdk.running(link.handler) or self._sdk.half_torn(link.handler))
        ):
            # Reopening it in place would serve new messages on a link its held messages
            # cannot settle on; and a handler marked running without its AMQP client fails
            # every call. Its locks are gone either way.
            await self._drop(self._receivers, link)
        return self._receiver(address, mode, lane)

    async def _idle_receiver(self, address: Address) -> Link:
        """A peek-lock receiver of the address with no request on it, for a `$management` request.

        The first lane is the receiver that locks; more are opened as requests overlap, up to
        MANAGEMENT_LANES, after which a request waits its turn on the least busy one.
        """
        busy: list[Link] = []
        for lane in range(MANAGEMENT_LANES):
            key = self._receiver_key(address, ReceiveMode.PEEK_LOCK, lane)
            if key not in self._receivers or not self._receivers[key].lock.locked():
                return await self._live_receiver(address, ReceiveMode.PEEK_LOCK, lane)
            busy.append(self._receivers[key])
        return busy[0]

    @staticmethod
    def _receiver_key(address: Address, mode: ReceiveMode, lane: int) -> tuple[Any, ...]:
        return (str(address), mode) if lane == 0 else (str(address), mode, lane)

    def _receiver(self, address: Address, mode: ReceiveMode, lane: int = 0) -> Link:
        """The cached receiver of an address: lock tokens only settle on the link that locked them."""
        key = self._receiver_key(address, mode, lane)
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
            self._sdk.prepared(receiver)
        except SbdlqError:
            raise
        except Exception as exc:
            raise self._translate(exc, str(address)) from exc
        link = self._receivers[key] = Link(key, receiver)
        return link

    def _async_credential(self) -> Any:
        if self._credential is None:
            credential = self._user_credential
            if credential is None:
                credential = self._owned_credential = default_async_credential()
            self._credential = as_async_credential(credential)
        return self._credential

    def _sync_credential(self) -> Any:
        """A credential for the sync admin client, which calls get_token from its worker thread."""
        if self._user_credential is not None and not is_async_credential(self._user_credential):
            return self._user_credential
        return SyncCredential(self._async_credential(), asyncio.get_running_loop(), self._timeout_s)

    async def _guard(
        self,
        awaitable: Awaitable[T],
        what: str,
        *,
        timeout: float | None = None,
    ) -> T:
        """Await an SDK call within the timeout, translating whatever it raises."""
        limit = self._timeout_s if timeout is None else timeout
        return await guarded(awaitable, limit, lambda exc: self._translate(exc, what))

    def _translate(self, exc: BaseException, what: str) -> SbdlqError:
        error = translate_error(exc, host=self._host, what=what, timeout_s=self._timeout_s, emulator=self._emulator)
        if isinstance(error, ServiceUnavailable):
            # The wire failed somewhere: every connection may be gone before the SDK notices. The
            # next chunk's locks are proven by a renewal, and senders open again before they send.
            self._wire_doubted = True
            self._wire_failures += 1
        return error

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
