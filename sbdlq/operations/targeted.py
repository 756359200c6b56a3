"""Targeted routing: rewrite a topic's subscription rules so a copy can be sent to one subscription.

Enabled, a message carrying the application property `sbdlq-target` is taken only by the
subscription it names (that subscription's `sbdlq-target` rule); every other message routes as
before. Each rule is changed in place, in one step (an update keeps its name, its action and
its place), into `[sbdlq-target] IS NULL AND (<its filter>)`: for a message without the
property the guard is TRUE and the filter decides alone, so the set of rules a message matches,
and what their actions do, is the same at every step. A kill between two steps leaves a topic
that routes untagged messages as before; `status` says it is half done, and a rerun finishes.

The original of every rewritten rule is kept in the rewritten rule itself, so the namespace
alone suffices to disable: a SQL filter is the text between the guard's parentheses; a
correlation filter (written as the equivalent SQL) also carries its fields as JSON in a string
literal that opens the filter (`'sbdlq-correlation {...}' <> ''`, always TRUE). A TrueFilter or
FalseFilter is written as `1=1` or `1=0`; a SqlFilter of just that text opens with
`'sbdlq-sql' <> ''` so that it comes back a SqlFilter.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sbdlq.addresses import EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, RuleChanged, SbdlqError
from sbdlq.models import SubscriptionRule, SubscriptionRules
from sbdlq.operations import lease as leases
from sbdlq.operations.lease import Lease, is_lease
from sbdlq.sqlfilter.correlation import CORRELATION_KEYS, CORRELATION_PROPS, correlation_key

#: The application property a targeted copy carries: the name of the one subscription to take it.
TARGET_PROPERTY = "sbdlq-target"
#: The rule each subscription gets: it takes the copies that name it.
TARGET_RULE = "sbdlq-target"
_GUARD = f"[{TARGET_PROPERTY}] IS NULL AND ("
_CORRELATION_MARK = "sbdlq-correlation "
_CORRELATION_TAIL = " <> '' AND "
_SQL_MARK = "sbdlq-sql"
#: The texts a TrueFilter and a FalseFilter are rewritten with (the service reads a FalseFilter as 1>1).
_CONSTANTS = {True: "1=1", False: "1=0"}
_CONSTANT_TEXTS = {text: value for value, text in _CONSTANTS.items()}
ENABLE_HINT = "run `sbdlq routing enable-targeted {topic}` first"


def sql_text(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _identifier(name: str) -> str:
    """An application property as a SQL delimited identifier."""
    return "[" + name.replace("]", "]]") + "]"


def target_rule(subscription: str) -> SubscriptionRule:
    """The rule by which a subscription takes the copies that name it (no action: kept as sent)."""
    return SubscriptionRule(TARGET_RULE, sql=f"{_identifier(TARGET_PROPERTY)} = {sql_text(subscription)}")


class Inexact(BadInput):
    """A rule whose rewrite would not route exactly as the original."""


#: The option by which the user accepts that a correlation filter's property names match in any case.
ACCEPT_CASE_OPTION = "--accept-case-insensitive-names"


def case_sensitive_names(rule: SubscriptionRule) -> list[str]:
    """The application property names a correlation filter matches by their exact case.

    SQL finds a property whatever the case of its name; a correlation filter only by its exact
    name: `{"Region": "eu"}` skips a message with `region: eu`, its SQL rewrite takes it.
    """
    names: list[str] = []
    for key, value in (rule.correlation or {}).items():
        if correlation_key(key) in CORRELATION_PROPS and isinstance(value, dict):
            names.extend(str(name) for name, expected in value.items() if expected is not None)
    return names


def correlation_sql(subscription: str, rule: SubscriptionRule, *, accept_case_insensitive_names: bool = False) -> str:
    """The SQL filter equal to a correlation filter; Inexact when there is none.

    A correlation value matches only a value equal to it and of its type; SQL `=` converts a
    text to a number or a time, so a property compares as text only after `LIKE '%'` says it is
    one. Only text values are taken: for a number or a Boolean no SQL test of the type exists.
    Application property names match in any case in SQL, so a filter with any is Inexact
    unless the user accepts that (`accept_case_insensitive_names`).
    """
    assert rule.correlation is not None
    parts: list[str] = []
    for key, value in rule.correlation.items():
        norm = correlation_key(key)
        if value is None:
            continue
        if norm in CORRELATION_PROPS:
            if not isinstance(value, dict):
                raise _inexact(subscription, rule, f"its {key} are not a map")
            for name, expected in value.items():
                if expected is None:
                    continue
                if type(expected) is not str:
                    raise _inexact(subscription, rule, f"property {name} = {expected!r} is not text")
                ident = _identifier(str(name))
                # The type test first: AND reads left to right, so `=` never meets a number or a
                # time, which Service Bus may convert and fail on (a FilterException).
                parts.append(f"{ident} LIKE '%' AND {ident} = {sql_text(expected)}")
        elif norm in CORRELATION_KEYS:
            if type(value) is not str:
                raise _inexact(subscription, rule, f"{key} = {value!r} is not text")
            parts.append(f"sys.{CORRELATION_KEYS[norm]} = {sql_text(value)}")
        else:
            raise _inexact(subscription, rule, f"unknown correlation field {key}")
    names = case_sensitive_names(rule)
    if names and not accept_case_insensitive_names:
        raise _inexact(
            subscription,
            rule,
            f"it matches property {', '.join(names)} by the exact case of the name, SQL in any case",
            hint=f"add {ACCEPT_CASE_OPTION} to accept that, change the rule to a SQL filter, or resubmit --to a queue",
        )
    return " AND ".join(parts) or "1=1"


def _inexact(subscription: str, rule: SubscriptionRule, why: str, hint: str | None = None) -> Inexact:
    return Inexact(
        f"rule {rule.name} of subscription {subscription}: its correlation filter has no exact SQL equivalent ({why})",
        hint=hint or "change the rule to a SQL filter, or resubmit --to a queue",
    )


def rewrite(
    subscription: str, rule: SubscriptionRule, *, accept_case_insensitive_names: bool = False
) -> SubscriptionRule:
    """The rule, guarded so tagged messages skip it; its name and action kept."""
    if rule.correlation is not None:
        kept = json.dumps(rule.correlation, ensure_ascii=False, separators=(",", ":"))
        equal = correlation_sql(subscription, rule, accept_case_insensitive_names=accept_case_insensitive_names)
        sql = f"{sql_text(_CORRELATION_MARK + kept)}{_CORRELATION_TAIL}{_GUARD}{equal})"
    elif rule.constant is not None:
        sql = f"{_GUARD}{_CONSTANTS[rule.constant]})"
    elif (rule.sql or "1=1") in _CONSTANT_TEXTS:
        # A SqlFilter whose text is a TrueFilter's or FalseFilter's: marked, to come back a SqlFilter.
        sql = f"{sql_text(_SQL_MARK)}{_CORRELATION_TAIL}{_GUARD}{rule.sql or '1=1'})"
    else:
        sql = f"{_GUARD}{rule.sql or '1=1'})"
    from sbdlq.sqlfilter.parser import MAX_LENGTH

    if len(sql) > MAX_LENGTH:
        raise Inexact(
            f"rule {rule.name} of subscription {subscription}: its rewritten filter would be {len(sql)} "
            f"characters, over Service Bus's {MAX_LENGTH}",
            hint="shorten the rule's filter, or resubmit --to a queue",
        )
    _check_compiles(subscription, rule, sql)
    return SubscriptionRule(
        rule.name,
        sql=sql,
        action=rule.action,
        parameters=rule.parameters,
        action_parameters=rule.action_parameters,
    )


def _check_compiles(subscription: str, rule: SubscriptionRule, rewritten: str) -> None:
    """Inexact unless the original filter reads on its own (then `(filter)` groups it whole)."""
    from sbdlq.sqlfilter.subscription import sql_filter

    for text in ([rule.sql or "1=1"] if rule.correlation is None else []) + [rewritten]:
        try:
            sql_filter(text, rule.parameters)
        except BadInput as exc:
            raise Inexact(
                f"rule {rule.name} of subscription {subscription}: sbdlq cannot read its filter ({exc.message}), "
                "so it cannot prove a rewrite exact",
                hint="change the rule, or resubmit --to a queue",
            ) from None


def original_of(rule: SubscriptionRule) -> SubscriptionRule | None:
    """The rule a rewritten rule was made from; None when the rule is not a rewritten one."""
    sql = rule.sql
    if rule.correlation is not None or sql is None or not sql.endswith(")"):
        return None
    marked = sql_text(_SQL_MARK) + _CORRELATION_TAIL + _GUARD
    if sql.startswith(_GUARD) or sql.startswith(marked):
        inner = sql[len(marked if sql.startswith(marked) else _GUARD) : -1]
        # A TrueFilter or FalseFilter (the default rule is one) was written as its text; a
        # SqlFilter of that text carries the mark.
        return SubscriptionRule(
            rule.name,
            sql=inner,
            action=rule.action,
            parameters=rule.parameters,
            action_parameters=rule.action_parameters,
            constant=None if sql.startswith(marked) else _CONSTANT_TEXTS.get(inner),
        )
    if not sql.startswith("'" + _CORRELATION_MARK.replace("'", "''")):
        return None
    from sbdlq.sqlfilter.lexer import STRING, tokenize

    try:
        first = tokenize(sql)[0]
    except Exception:
        return None
    rest = sql[len(first.text) :]
    if first.kind != STRING or not rest.startswith(_CORRELATION_TAIL + _GUARD):
        return None
    try:
        fields = json.loads(str(first.value)[len(_CORRELATION_MARK) :])
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    return SubscriptionRule(rule.name, correlation=fields, action=rule.action, action_parameters=rule.action_parameters)


@dataclass(frozen=True, slots=True)
class SubscriptionState:
    """Where one subscription stands: its rules, how many are rewritten, its target rule."""

    subscription: str
    rules: int
    rewritten: int
    target_rule: bool

    @property
    def state(self) -> str:
        """on, off or partial."""
        if self.target_rule and self.rewritten == self.rules:
            return "on"
        if not self.target_rule and self.rewritten == 0:
            return "off"
        return "partial"

    def to_json(self) -> dict[str, Any]:
        return {
            "subscription": self.subscription,
            "state": self.state,
            "rules": self.rules,
            "rewritten": self.rewritten,
            "target_rule": self.target_rule,
        }


@dataclass(frozen=True, slots=True)
class TopicState:
    """Targeted routing on a topic: enabled, disabled or partial, subscription by subscription."""

    topic: str
    subscriptions: tuple[SubscriptionState, ...]

    @property
    def state(self) -> str:
        states = {s.state for s in self.subscriptions}
        if states <= {"on"} and states:
            return "enabled"
        if states <= {"off"}:
            return "disabled"
        return "partial"

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "state": self.state, "subscriptions": [s.to_json() for s in self.subscriptions]}


def _is_target_rule(sub: SubscriptionRules, rule: SubscriptionRule) -> bool:
    return rule.name.casefold() == TARGET_RULE.casefold() and rule == target_rule(sub.subscription)


def topic_state(topic: EntityPath, subscriptions: list[SubscriptionRules]) -> TopicState:
    """The state the rules read say the topic is in."""
    states = []
    for sub in subscriptions:
        own = [r for r in sub.rules if not _is_target_rule(sub, r) and not is_lease(r)]
        states.append(
            SubscriptionState(
                sub.subscription,
                len(own),
                sum(1 for r in own if original_of(r) is not None),
                len(own) < len(sub.rules),
            )
        )
    return TopicState(str(topic), tuple(states))


@dataclass(frozen=True, slots=True)
class Step:
    """One rule change: `add` a target rule, `update` a rule in place, or `delete` a target rule."""

    subscription: str
    how: str
    rule: SubscriptionRule
    before: SubscriptionRule | None = None
    accepted: tuple[str, ...] = ()  # property names the user accepted matching in any case

    def line(self) -> str:
        """The step as the plan prints it."""
        where = f"{self.subscription}: rule {self.rule.name}"
        if self.how == "add":
            return f"{where}: add, filter {self.rule.sql}"
        if self.how == "delete":
            return f"{where}: delete"
        before = self.before
        was = before.sql if before is not None and before.sql is not None else f"correlation {_fields(before)}"
        now = self.rule.sql if self.rule.sql is not None else f"correlation {_fields(self.rule)}"
        action = f" (action kept: {self.rule.action})" if self.rule.action else ""
        accepted = f" (property names now match in any case: {', '.join(self.accepted)})" if self.accepted else ""
        return f"{where}: filter {was} -> {now}{action}{accepted}"


def _fields(rule: SubscriptionRule | None) -> str:
    corr = (rule.correlation if rule is not None else None) or {}
    return json.dumps({k: v for k, v in corr.items() if v not in (None, {})}, ensure_ascii=False)


def _conflict(sub: SubscriptionRules) -> None:
    for rule in sub.rules:
        if rule.name.casefold() == TARGET_RULE.casefold() and not _is_target_rule(sub, rule):
            raise BadInput(
                f"subscription {sub.subscription} has a rule named {rule.name} that sbdlq did not write",
                hint=f"rename or delete that rule: sbdlq names its own rule {TARGET_RULE}",
            )


def enable_steps(subscriptions: list[SubscriptionRules], *, accept_case_insensitive_names: bool = False) -> list[Step]:
    """The changes that enable targeted routing (none when it is on); Inexact before any change.

    Per subscription the target rule comes first (it takes no untagged message), then each
    rule is updated in place: never a moment with a rule twice (an action applied twice, a
    second copy) or with none (a message lost). A correlation filter naming application
    properties is Inexact unless `accept_case_insensitive_names`; its step then lists them.
    """
    accept = accept_case_insensitive_names
    steps: list[Step] = []
    for sub in subscriptions:
        _conflict(sub)
        if not any(_is_target_rule(sub, r) for r in sub.rules):
            steps.append(Step(sub.subscription, "add", target_rule(sub.subscription)))
        for rule in sub.rules:
            if _is_target_rule(sub, rule) or original_of(rule) is not None or is_lease(rule):
                continue
            rewritten = rewrite(sub.subscription, rule, accept_case_insensitive_names=accept)
            steps.append(Step(sub.subscription, "update", rewritten, rule, tuple(case_sensitive_names(rule))))
    return steps


def disable_steps(subscriptions: list[SubscriptionRules]) -> list[Step]:
    """The changes that restore the original rules (each in place), then delete the target rules."""
    steps: list[Step] = []
    for sub in subscriptions:
        for rule in sub.rules:
            original = None if _is_target_rule(sub, rule) else original_of(rule)
            if original is not None:
                steps.append(Step(sub.subscription, "update", original, rule))
        steps.extend(Step(sub.subscription, "delete", r) for r in sub.rules if _is_target_rule(sub, r))
    return steps


async def read_rules(backend: Backend, topic: EntityPath) -> list[SubscriptionRules]:
    """The topic's subscriptions and rules (AuthError without Manage rights: exit 5)."""
    from sbdlq.errors import AuthError

    try:
        return await backend.subscription_rules(topic)
    except AuthError as exc:
        raise AuthError(
            f"cannot read the rules of topic {topic}'s subscriptions ({exc.message})",
            hint="reading and changing rules needs a key with Manage rights",
        ) from exc


async def apply_steps(
    backend: Backend, topic: EntityPath, steps: list[Step], *, done: Callable[[Step], None] = lambda _: None
) -> None:
    """Make the changes in order; each one is a single write on the broker.

    An update or a delete is made only while the rule is still the one the plan read (the
    backend compares right before, the emulator inside, the write): a rule someone changed
    since is never overwritten; RuleChanged (exit 1) stops the run there, every step before it
    done and each one safe to stop after, so running the command again plans from what is there.
    """
    for step in steps:
        subscription = EntityPath(topic.name, step.subscription)
        try:
            if step.how == "add":
                await _create(backend, topic, subscription, step.rule)
            elif step.how == "update":
                await backend.update_rule(subscription, step.rule, expected=step.before)
            else:
                await backend.delete_rule(subscription, step.rule.name, expected=step.rule)
        except RuleChanged:
            raise RuleChanged(f"rule {step.rule.name} of {subscription} changed since the plan; run again") from None
        done(step)


async def _create(backend: Backend, topic: EntityPath, subscription: EntityPath, rule: SubscriptionRule) -> None:
    """Create the rule; RuleChanged when that failed because a rule of its name appeared since the plan."""
    try:
        await backend.create_rule(subscription, rule)
    except SbdlqError:
        sub, name = (subscription.subscription or "").casefold(), rule.name.casefold()
        for held in await read_rules(backend, topic):
            if held.subscription.casefold() == sub and any(r.name.casefold() == name for r in held.rules):
                raise RuleChanged(f"rule {rule.name} of {subscription} appeared") from None
        raise


async def require_targeted(backend: Backend, topic: EntityPath) -> list[SubscriptionRules]:
    """The topic's subscriptions; refused (exit 2) unless targeted routing is fully enabled there."""
    subscriptions = await read_rules(backend, topic)
    refusal = not_targeted(topic, subscriptions)
    if refusal is not None:
        raise refusal
    return subscriptions


def not_targeted(topic: EntityPath, subscriptions: list[SubscriptionRules]) -> BadInput | None:
    """Why copies cannot be targeted at one subscription on these rules; None: they can (enabled)."""
    state = topic_state(topic, subscriptions).state
    if state == "enabled":
        return None
    return BadInput(
        f"targeted routing is {state} on topic {topic}: a copy meant for one subscription could reach others",
        hint=ENABLE_HINT.format(topic=topic),
    )


#: The option by which `disable-targeted` takes over the leases of targeted runs whose holder died.
FORCE_OPTION = "--force"


@dataclass(frozen=True, slots=True)
class RoutingPlan:
    """What `enable-targeted` or `disable-targeted` does: the rule changes, and (disable) the leases
    it removes first."""

    steps: list[Step]
    #: leases whose holder may be gone: expired, or (--force) taken over
    leases: list[Lease] = field(default_factory=list)
    #: of those, the live ones taken over with --force
    forced: list[Lease] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The lease removals as the plan prints them."""
        return [
            f"{x.subscription}: rule {x.rule.name}: delete (the lease of {x.line()}, "
            + ("taken over: --force)" if x in self.forced else "expired)")
            for x in self.leases
        ]


def leased_refusal(topic: EntityPath, live: list[Lease]) -> leases.RoutingLeased:
    """The refusal of a disable while targeted runs hold leases (exit 1)."""
    more = f" (and {len(live) - 1} more)" if len(live) > 1 else ""
    return leases.RoutingLeased(
        f"targeted routing on topic {topic} is in use by {live[0].line()}{more}: disabling it now would let that "
        "run's copies reach every subscription",
        hint=f"wait for the run to end, or add {FORCE_OPTION} if its holder died (a run still alive then stops "
        "before its next chunk and reports what may have strayed)",
    )


#: How often `disable-targeted --wait` reads the leases again.
WAIT_POLL_S = 2.0


async def wait_for_leases(
    backend: Backend,
    topic: EntityPath,
    wait_s: float,
    *,
    note: Callable[[str], None],
    wall: Callable[[], datetime] = leases.now_utc,
) -> list[SubscriptionRules]:
    """The topic's rules once no targeted run holds a live lease (read again every WAIT_POLL_S);
    RoutingLeased when one still does after `wait_s`."""
    import asyncio
    from time import monotonic

    deadline = monotonic() + wait_s
    said = False
    while True:
        subscriptions = await read_rules(backend, topic)
        live = leases.live_runs(subscriptions, wall())
        left = deadline - monotonic()
        if not live:
            return subscriptions
        if left <= 0:
            refusal = leased_refusal(topic, live)
            refusal.message += f" (waited {wait_s:g}s)"
            raise refusal
        if not said:
            note(f"waiting up to {wait_s:g}s for {live[0].line()} to end")
            said = True
        await asyncio.sleep(min(WAIT_POLL_S, left))


def disable_plan(
    topic: EntityPath, subscriptions: list[SubscriptionRules], now: datetime, *, force: bool
) -> RoutingPlan:
    """The disable's changes; RoutingLeased while a targeted run's lease is live, unless `force`."""
    found = leases.leases_in(subscriptions)
    live = [x for x in found if x.kind == leases.RUN and x.live(now)]
    if live and not force:
        raise leased_refusal(topic, live)
    stale = [x for x in found if not x.live(now) or x in live]
    return RoutingPlan(disable_steps(subscriptions), stale, live)


async def disable_leased(
    backend: Backend,
    topic: EntityPath,
    plan: RoutingPlan,
    *,
    force: bool,
    wall: Callable[[], datetime] = leases.now_utc,
    done: Callable[[Step], None] = lambda _: None,
) -> None:
    """Disable targeted routing without racing a run: write this disable's own lease, read the
    leases again (a run that began since refuses the disable, or sees this lease and refuses
    itself), remove the leases of the plan, then make the changes; this lease goes at the end."""
    subscriptions = sorted(s.subscription for s in await read_rules(backend, topic))
    if not subscriptions:
        await apply_steps(backend, topic, plan.steps, done=done)
        return
    where = EntityPath(topic.name, subscriptions[0])
    mine = leases.lease_rule(
        leases.new_token(), leases.DISABLE, leases.holder_name(), wall() + timedelta(seconds=leases.LEASE_S)
    )
    await backend.create_rule(where, mine)
    try:
        current = await read_rules(backend, topic)
        live = [x for x in leases.live_runs(current, wall()) if x.rule.name not in {y.rule.name for y in plan.leases}]
        if live and not force:
            raise leased_refusal(topic, live)
        for lease in [*plan.leases, *live]:
            await _remove_lease(backend, topic, lease, force=force)
        await apply_steps(backend, topic, plan.steps, done=done)
    finally:
        with contextlib.suppress(SbdlqError):
            await backend.delete_rule(where, mine.name, expected=mine)


async def _remove_lease(backend: Backend, topic: EntityPath, lease: Lease, *, force: bool) -> None:
    """Remove a lease as read; one renewed since (its holder is alive) only with --force."""
    from sbdlq.errors import EntityNotFound

    where = EntityPath(topic.name, lease.subscription)
    try:
        await backend.delete_rule(where, lease.rule.name, expected=lease.rule)
        return
    except (RuleChanged, EntityNotFound):
        pass
    try:
        held = [r for r in await backend.rules_of(where) if r.name.lower() == lease.rule.name.lower()]
    except EntityNotFound:
        return  # the subscription went, and its lease with it
    if not held:
        return  # given back meanwhile
    if not force:
        raise leased_refusal(topic, [leases.read_lease(lease.subscription, held[0]) or lease])
    with contextlib.suppress(EntityNotFound):
        await backend.delete_rule(where, lease.rule.name)
