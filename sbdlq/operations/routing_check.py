"""The routing check of resubmit: which subscriptions of the target topic would take a copy.

A topic accepts every message it is sent and drops, without a word to the sender, the ones no
subscription's rules take. Resubmitting such a copy and then completing its original would
lose the message, so the copies are tried against the subscriptions' rules first, with the
same evaluation the emulator engine routes with (`sbdlq.sqlfilter.subscription`), on either
backend without the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sbdlq.addresses import EntityPath, parse_entity
from sbdlq.backends.base import Backend
from sbdlq.errors import AuthError, BadInput, EntityNotFound, SbdlqError, ServiceUnavailable
from sbdlq.models import EntityInfo, OutboundMessage, SubscriptionRule, SubscriptionRules
from sbdlq.operations.lease import is_lease

#: Statuses in which a subscription takes the messages sent to its topic. Conservative: a
#: ReceiveDisabled subscription takes them on Service Bus, but not in the emulator engine.
_TAKING = frozenset({"Active"})

ALLOW_FLAG = "--allow-unverified-routing"
#: auto-forwarding hops Service Bus follows (past them the message is transfer-dead-lettered)
MAX_FORWARD_HOPS = 4


class _Subscription:
    """One subscription's compiled rules."""

    def __init__(self, rules: SubscriptionRules) -> None:
        from sbdlq.sqlfilter.subscription import compile_rule

        self.name = rules.subscription
        self.rules = rules.rules
        self.forward_to = rules.forward_to
        self.active = rules.status in _TAKING
        try:
            self.compiled = [compile_rule(r) for r in rules.rules]
        except Exception as exc:  # a rule the broker took but the filter engine cannot read
            raise BadInput(
                f"cannot evaluate the rules of subscription {rules.subscription}: {exc}",
                hint=f"rerun with {ALLOW_FLAG} to resubmit without the routing check",
            ) from None
        # The common case: a `1=1` rule takes everything, no evaluation per copy needed.
        self.takes_all = self.active and any(flt is True for _, flt, _ in self.compiled)

    def takes(self, view: _View) -> bool:
        """Whether the subscription's rules take the copy (an evaluation failure does not)."""
        from sbdlq.sqlfilter.subscription import takes

        if self.takes_all or not self.active:
            return self.takes_all
        return takes(self.compiled, *view)


class RoutingCheck:
    """The subscriptions of a topic, ready to say which of them take a copy."""

    def __init__(self, topic: EntityPath, subscriptions: list[SubscriptionRules]) -> None:
        self.topic = topic
        #: the rules as read (what else is decided from them, such as targeted routing's state)
        self.rules = subscriptions
        self.subscriptions = {s.subscription.lower(): _Subscription(s) for s in subscriptions}
        self.takes_all = bool(self.subscriptions) and any(s.takes_all for s in self.subscriptions.values())

    def forwarding(self) -> dict[str, str]:
        """The subscriptions that auto-forward what they take: name → destination."""
        return {name: s.forward_to for name, s in self.subscriptions.items() if s.forward_to}

    def stop_counting(self, subscription: str) -> None:
        """Treat a subscription as taking nothing (its forwarding goes where the check cannot follow)."""
        sub = self.subscriptions[subscription.lower()]
        sub.active = sub.takes_all = False
        self.takes_all = any(s.takes_all for s in self.subscriptions.values())

    def routable(self, copy: OutboundMessage) -> bool:
        """Whether at least one subscription takes the copy."""
        if self.takes_all:
            return True
        view = _view(copy)
        return any(s.takes(view) for s in self.subscriptions.values())

    def reaches(self, subscription: str, copy: OutboundMessage) -> bool:
        """Whether the named subscription takes the copy."""
        sub = self.subscriptions.get(subscription.lower())
        if sub is None:
            return False
        if sub.takes_all:
            return True
        view = _view(copy)
        return sub.takes(view)

    def others(self, subscription: str) -> list[tuple[str, bool]]:
        """The other subscriptions that take messages at all: (name, whether it takes every copy)."""
        return [(s.name, s.takes_all) for k, s in self.subscriptions.items() if k != subscription.lower() and s.active]

    def other_takers(self, subscription: str, copy: OutboundMessage) -> list[str]:
        """The subscriptions other than `subscription` that take the copy."""
        others = [s for k, s in self.subscriptions.items() if k != subscription.lower() and s.active]
        if not others:
            return []
        view = _view(copy)
        return [s.name for s in others if s.takes_all or s.takes(view)]

    def takers(self, copy: OutboundMessage) -> list[str]:
        """Every subscription that takes the copy."""
        taking = [s for s in self.subscriptions.values() if s.active]
        if not taking:
            return []
        if all(s.takes_all for s in taking):
            return [s.name for s in taking]
        view = _view(copy)
        return [s.name for s in taking if s.takes_all or s.takes(view)]

    def takes_everything(self, subscription: str) -> bool:
        """Whether the subscription takes every copy (no need to look at them first)."""
        sub = self.subscriptions.get(subscription.lower())
        return sub is not None and sub.takes_all

    def miss_hint(self, subscription: str) -> str:
        """Why a copy may miss the subscription it came from, and what to do."""
        sub = self.subscriptions.get(subscription.lower())
        rules: tuple[SubscriptionRule, ...] = sub.rules if sub is not None else ()
        rules = tuple(r for r in rules if not is_lease(r))  # a lease takes nothing: no reason to name it
        filters = "; ".join(r.sql or _correlation_text(r) for r in rules) or "none"
        actions = [r.action for r in rules if r.action]
        why = f"its rules: {filters}"
        if actions:
            why += (
                f"; the property was changed by the rule's action ({'; '.join(actions)}) when the message "
                "was first delivered, so its copy no longer matches"
            )
        elif sub is not None and not sub.active:
            why = "the subscription is not active"
        return f"{why}; select other messages, or resubmit them --to a queue"


def _correlation_text(rule: SubscriptionRule) -> str:
    return f"correlation filter {rule.correlation}" if rule.correlation is not None else "1=1"


#: What the rules see of a copy: its system properties (by SQL name) and application properties.
_View = tuple[dict[str, Any], dict[str, Any]]


def _view(copy: OutboundMessage) -> _View:
    """What a subscription's rules see of a copy on its way into the topic."""
    from sbdlq.sqlfilter.context import outbound_system

    return outbound_system(copy), dict(copy.application_properties)


async def load_routing(
    backend: Backend, topic: EntityPath, *, allow_unverified: bool, note: Callable[[str], None]
) -> RoutingCheck | None:
    """The topic's routing check; None (after a warning) when the rules cannot be read and that is allowed."""
    try:
        subscriptions = await backend.subscription_rules(topic)
    except (AuthError, ServiceUnavailable) as exc:
        if allow_unverified:
            note(f"warning: routing not verified: cannot read the rules of topic {topic}'s subscriptions")
            return None
        raise type(exc)(
            f"cannot read the rules of topic {topic}'s subscriptions ({exc.message}): copies no subscription "
            "takes would be dropped by the broker",
            hint=f"use a key with Manage rights, or rerun with {ALLOW_FLAG}: copies then go unchecked to every "
            "subscription whose rules take them, as with --fan-out",
        ) from exc
    except SbdlqError:
        raise
    return RoutingCheck(topic, subscriptions)


async def forwarding_chain(backend: Backend, info: EntityInfo) -> list[EntityInfo]:
    """The entity and every entity its auto-forwarding passes a message on to, in order.

    A destination that does not exist ends the chain: the broker transfer-dead-letters the
    message there, so it is kept.
    """
    chain = [info]
    while chain[-1].forward_to and len(chain) <= MAX_FORWARD_HOPS:
        try:
            chain.append(await backend.get_entity(parse_entity(chain[-1].forward_to)))
        except (EntityNotFound, BadInput):
            break
    return chain


@dataclass(frozen=True, slots=True)
class Destination:
    """Where copies sent to a target come to rest, and the routing check of that topic (if any)."""

    topic: EntityPath | None = None
    routing: RoutingCheck | None = None


async def check_destination(
    backend: Backend,
    target_info: EntityInfo,
    *,
    new_message_id: bool,
    allow_unverified: bool,
    note: Callable[[str], None],
    command: str = "resubmit",
) -> Destination:
    """Refuse a target any entity of whose auto-forwarding chain may drop copies; read the rules
    of the topic the chain ends in (resubmit and replay share this)."""
    from sbdlq.operations.sending import check_target

    chain = await forwarding_chain(backend, target_info)
    for hop in chain:
        check_target(hop, parse_entity(hop.path), new_message_id=new_message_id, command=command)
    if chain[-1].kind != "topic":
        return Destination()
    topic = parse_entity(chain[-1].path)
    routing = await load_routing(backend, topic, allow_unverified=allow_unverified, note=note)
    if routing is not None:
        await _follow_forwarding(backend, routing, new_message_id=new_message_id, note=note, command=command)
    return Destination(topic, routing)


async def _follow_forwarding(
    backend: Backend, routing: RoutingCheck, *, new_message_id: bool, note: Callable[[str], None], command: str
) -> None:
    """Subscriptions that forward into another topic don't count as taking a copy (their
    forwarded copy may match nothing there); those forwarding into duplicate detection refuse."""
    from sbdlq.operations.sending import check_target

    for name, destination in routing.forwarding().items():
        try:
            chain = await forwarding_chain(backend, await backend.get_entity(parse_entity(destination)))
        except (EntityNotFound, BadInput):
            continue  # the broker transfer-dead-letters what it cannot forward: kept
        for hop in chain:
            check_target(hop, parse_entity(hop.path), new_message_id=new_message_id, command=command)
        if chain[-1].kind == "topic":
            routing.stop_counting(name)
            note(
                f"warning: subscription {name} forwards to topic {chain[-1].path}: copies only it would "
                "take are not sent"
            )
