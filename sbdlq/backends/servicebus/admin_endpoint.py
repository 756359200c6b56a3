"""The namespace's management (HTTP) endpoint: entity properties and runtime counts.

Through the SDK's sync ServiceBusAdministrationClient, in worker threads of its own. When the
endpoint cannot serve us (the emulator without its management port, a key without Manage rights)
it is marked unusable once, and the backend falls back to what AMQP can tell.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit

from sbdlq.addresses import EntityPath
from sbdlq.backends.servicebus.clients import AdminPort, admin_client_kwargs, sdk_connection_string
from sbdlq.backends.servicebus.conversion import (
    entity_name,
    queue_info,
    sdk_action,
    sdk_filter,
    subscription_info,
    subscription_rule,
    topic_info,
)
from sbdlq.backends.servicebus.errors import describe, guarded, translate_error
from sbdlq.connstr import ConnectionInfo, redact
from sbdlq.errors import AuthError, EntityNotFound, RuleChanged, SbdlqError, ServiceUnavailable
from sbdlq.models import Counts, EntityInfo, SubscriptionRule, SubscriptionRules
from sbdlq.transport import Proxy

T = TypeVar("T")

_TOPIC_HINT = "a topic has no DLQ of its own; name a subscription: TOPIC/Subscriptions/SUB"


class AdminSide:
    """The admin client of one backend, created on first use, and whether it is still worth asking."""

    def __init__(
        self,
        *,
        info: ConnectionInfo | None,
        host: str,
        emulator: bool,
        port: AdminPort,
        proxy: Proxy | None = None,
        timeout_s: float,
        credential: Callable[[], Any],
        say: Callable[[str], None],
    ) -> None:
        self._info = info
        self._host = host
        self._emulator = emulator
        self._port = port  # the emulator's admin port, where it came from (--verbose), and its TLS
        self._proxy = proxy
        self._timeout_s = timeout_s
        self._credential = credential  # a sync credential, asked for only with a namespace
        self._say = say
        self._client: Any | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.usable = True
        self._error: SbdlqError | None = None

    async def list_entities(self) -> list[EntityInfo]:
        """Every queue, topic and subscription (there is no AMQP fallback for this)."""
        if not self.usable:
            raise self._no_admin_error(self._error)

        def work(admin: Any) -> list[EntityInfo]:
            found: list[EntityInfo] = [queue_info(q) for q in admin.list_queues()]
            for topic in admin.list_topics():
                subs = list(admin.list_subscriptions(topic.name))
                found.append(topic_info(topic, len(subs)))
                found.extend(subscription_info(topic.name, s) for s in subs)
            return found

        try:
            # Listing pages through many requests, each bounded by the transport timeouts.
            return await self._call(work, "the namespace's entities", timeout=math.inf)
        except SbdlqError as exc:
            if not self._fallback(exc):
                raise
            self._down(exc)
            raise self._no_admin_error(exc) from exc

    async def subscription_rules(self, topic: EntityPath) -> list[SubscriptionRules]:
        """A topic's subscriptions with their rules; AuthError without Manage rights (no AMQP fallback)."""
        if not self.usable and self._error is not None:
            raise self._error

        def work(admin: Any) -> list[SubscriptionRules]:
            return [
                SubscriptionRules(
                    subscription=s.name,
                    status=str(getattr(s.status, "value", s.status) or "Active"),
                    rules=tuple(subscription_rule(r) for r in admin.list_rules(topic.name, s.name)),
                    forward_to=entity_name(s.forward_to),
                )
                for s in admin.list_subscriptions(topic.name)
            ]

        return await self._call(work, f"the rules of topic {topic}'s subscriptions", timeout=math.inf)

    async def subscription_names(self, topic: EntityPath) -> list[str]:
        """The names of a topic's subscriptions: one listing (a targeted run asks before each chunk)."""
        if not self.usable and self._error is not None:
            raise self._error

        def work(admin: Any) -> list[str]:
            return [str(s.name) for s in admin.list_subscriptions(topic.name)]

        return await self._call(work, f"the subscriptions of topic {topic}", timeout=math.inf)

    async def rules_of(self, subscription: EntityPath) -> tuple[SubscriptionRule, ...]:
        """One subscription's rules: one listing."""
        if not self.usable and self._error is not None:
            raise self._error

        def work(admin: Any) -> tuple[SubscriptionRule, ...]:
            rules = admin.list_rules(subscription.name, subscription.subscription or "")
            return tuple(subscription_rule(r) for r in rules)

        return await self._call(work, f"the rules of {subscription}", timeout=math.inf)

    async def change_rule(
        self,
        subscription: EntityPath,
        rule: SubscriptionRule | str,
        how: str,
        *,
        expected: SubscriptionRule | None = None,
    ) -> None:
        """Create, update (one PUT: name and order kept) or delete a subscription's rule; with
        `expected`, RuleChanged unless the held rule, read right before the write, equals it."""
        topic, sub = subscription.name, subscription.subscription or ""
        name = rule if isinstance(rule, str) else rule.name

        def work(admin: Any) -> None:
            if expected is not None:
                # The admin API has no compare-and-write for rules: the read right before the
                # write leaves a window of one round trip, not one of a whole plan.
                _expect_rule(admin, subscription, name, expected)
            if how == "delete":
                admin.delete_rule(topic, sub, str(rule))
                return
            assert isinstance(rule, SubscriptionRule)
            if how == "create":
                admin.create_rule(topic, sub, rule.name, filter=sdk_filter(rule), action=sdk_action(rule))
                return
            held = admin.get_rule(topic, sub, rule.name)
            held.filter = sdk_filter(rule)
            held.action = sdk_action(rule)
            admin.update_rule(topic, sub, held)

        await self._call(work, f"rule {name} of {subscription}")

    async def counts(self, entity: EntityPath) -> Counts | None:
        """Runtime counts; None when the endpoint cannot serve them (page through peek instead)."""

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
        return await self._attempt(lambda: self._call(work, describe(entity), hint=hint))

    async def get_entity(self, entity: EntityPath) -> EntityInfo | None:
        """A queue's, topic's or subscription's properties; None when the endpoint cannot serve them."""

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

        return await self._attempt(lambda: self._call(work, describe(entity)))

    def endpoint(self) -> str:
        """The endpoint's URL, as messages name it."""
        if self._emulator and self._info is not None:
            host = f"[{self._info.host}]" if ":" in self._info.host else self._info.host
            return f"{self._port.scheme}://{host}:{self._port.port}"
        return f"https://{self._info.host if self._info else self._host}"

    def close(self) -> None:
        """Close the client; never wait for a request still on its way to a dead host."""
        if self._client is not None:
            try:
                self._client.close()
            except Exception as exc:
                self._say(f"closing the admin client: {redact(str(exc))}")
            self._client = None
        if self._pool is not None:
            # Do not wait: a request to a dead host ends on its own transport timeout.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def _attempt(self, call: Callable[[], Awaitable[T]]) -> T | None:
        """call()'s answer; None when the endpoint is, or just turned out to be, unusable for it."""
        if not self.usable:
            return None
        try:
            return await call()
        except SbdlqError as exc:
            if not self._fallback(exc):
                raise
            self._down(exc)
            return None

    def _fallback(self, error: SbdlqError) -> bool:
        """Whether an admin failure should send us to the AMQP-only paths."""
        if isinstance(error, EntityNotFound):
            return False
        if self._emulator:
            # The emulator may run without its HTTP management port.
            return True
        # A Listen/Send-only key (or data-plane role) cannot read the management API, but
        # can still peek.
        return isinstance(error, AuthError)

    def _down(self, error: SbdlqError) -> None:
        if not self.usable:
            return  # concurrent calls failing together: say it once
        self.usable = False
        self._error = error
        self._say(f"admin endpoint {self.endpoint()} unusable ({error.line()}); using AMQP only")

    def _no_admin_error(self, cause: SbdlqError | None) -> SbdlqError:
        if isinstance(cause, AuthError):
            return cause  # a key without Manage rights: say that, not "unreachable"
        return ServiceUnavailable(
            f"cannot list entities: no admin endpoint answers at {self.endpoint()}",
            hint="name the entities instead (sbdlq count QUEUE TOPIC/Subscriptions/SUB), "
            "or use a key with Manage rights",
        )

    def _admin_client(self) -> Any:
        if self._client is None:
            from azure.servicebus.management import ServiceBusAdministrationClient

            kwargs = admin_client_kwargs(
                self._timeout_s, emulator=self._emulator, port=self._port.port, proxy=self._proxy, tls=self._port
            )
            if self._info is not None:
                self._client = ServiceBusAdministrationClient.from_connection_string(
                    sdk_connection_string(self._info), **kwargs
                )
            else:
                self._client = ServiceBusAdministrationClient(self._host, self._credential(), **kwargs)
            source = f" (port from {self._port.source})" if self._port.source else ""
            self._say(f"admin endpoint: {self.endpoint()}{source}")
        return self._client

    async def _call(
        self, work: Callable[[Any], T], what: str, *, timeout: float | None = None, hint: str | None = None
    ) -> T:
        """Run a blocking admin-client call in a worker thread, translated and time-bounded."""
        host = urlsplit(self.endpoint()).netloc
        try:
            admin = self._admin_client()
        except SbdlqError:
            raise
        except Exception as exc:
            raise self._translate(exc, what, host, None) from exc
        # The sync admin client: the aio one cannot even be imported without aiohttp, which
        # azure-core does not bring. Its own pool, not the loop's default executor: a
        # credential bridged from async may need that executor while these threads wait on it.
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sbdlq-admin")
        call = asyncio.get_running_loop().run_in_executor(self._pool, work, admin)
        limit = self._timeout_s if timeout is None else timeout
        return await guarded(call, limit, lambda exc: self._translate(exc, what, host, hint))

    def _translate(self, exc: BaseException, what: str, host: str, hint: str | None) -> SbdlqError:
        return translate_error(exc, host=host, what=what, timeout_s=self._timeout_s, emulator=self._emulator, hint=hint)


def _expect_rule(admin: Any, subscription: EntityPath, name: str, expected: SubscriptionRule) -> None:
    """RuleChanged unless the subscription's rule of that name is `expected` (gone counts as changed)."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        held = subscription_rule(admin.get_rule(subscription.name, subscription.subscription or "", name))
    except ResourceNotFoundError:
        held = None
    if held != expected:
        raise RuleChanged(f"rule {name} of {subscription} is not the one expected: it was changed or removed")
