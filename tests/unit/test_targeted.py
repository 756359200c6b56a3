"""operations/targeted.py's rewrites: exact for untagged messages, reversible, refused when not exact."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from sbdlq.models import SubscriptionRule, SubscriptionRules
from sbdlq.operations.targeted import (
    TARGET_PROPERTY,
    Inexact,
    correlation_sql,
    enable_steps,
    original_of,
    rewrite,
    target_rule,
)
from sbdlq.sqlfilter.subscription import compile_rule, takes

RULES = [
    SubscriptionRule("$Default", sql="1=1", constant=True),  # a TrueFilter, as both backends read it
    SubscriptionRule("never", sql="1=0", constant=False),  # a FalseFilter
    SubscriptionRule("sqltrue", sql="1=1"),  # a SqlFilter of a TrueFilter's text stays a SqlFilter
    SubscriptionRule("quote", sql="name = 'it''s' OR [odd]]name] IS NOT NULL", action="SET a = 1"),
    SubscriptionRule("grouped", sql="(a = 1) OR (b = 2)"),
    SubscriptionRule("corr", correlation={"label": "L", "correlation_id": None, "properties": {"k": "1", "q": "o'k"}}),
    SubscriptionRule("empty", correlation={"properties": {}}),
]
# Values that trip a SQL `=` that converts: numbers as text, text as numbers, Booleans, times.
VALUES: list[Any] = [None, "1", 1, 1.0, True, "o'k", "O'K", "", "2024-01-01T00:00:00Z", "L"]


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_the_original_comes_back_exactly(rule: SubscriptionRule) -> None:
    rewritten = rewrite("s", rule, accept_case_insensitive_names=True)
    assert rewritten.name == rule.name and rewritten.action == rule.action
    assert original_of(rewritten) == rule
    assert original_of(rule) is None


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_untagged_messages_match_as_before_and_tagged_ones_never(rule: SubscriptionRule) -> None:
    before, after = [compile_rule(rule)], [compile_rule(rewrite("s", rule, accept_case_insensitive_names=True))]
    for label, k, q, name in itertools.product(["L", "l", None], VALUES, VALUES, VALUES[:3]):
        system = {"Label": label, "CorrelationId": None}
        props = {key: v for key, v in {"k": k, "q": q, "name": name, "a": k, "b": q}.items() if v is not None}
        assert takes(after, system, props) == takes(before, system, props), (label, props)
        assert not takes(after, system, {**props, TARGET_PROPERTY: "s"})


def test_the_target_rule_takes_only_copies_naming_its_subscription() -> None:
    rule = [compile_rule(target_rule("o'brien"))]
    assert takes(rule, {}, {TARGET_PROPERTY: "o'brien"})
    assert not takes(rule, {}, {TARGET_PROPERTY: "other"})
    assert not takes(rule, {}, {})


@pytest.mark.parametrize(
    ("correlation", "why"),
    [
        ({"properties": {"n": 5}}, "property n = 5 is not text"),
        ({"properties": {"flag": True}}, "property flag = True is not text"),
        ({"message_id": 7}, "message_id = 7 is not text"),
    ],
)
def test_a_correlation_filter_without_an_exact_equivalent_is_refused(correlation: dict[str, Any], why: str) -> None:
    expected = f"rule r of subscription s: its correlation filter has no exact SQL equivalent \\({why}\\)"
    with pytest.raises(Inexact, match=expected):
        rewrite("s", SubscriptionRule("r", correlation=correlation), accept_case_insensitive_names=True)


def test_a_filter_sbdlq_cannot_read_or_too_long_is_refused() -> None:
    with pytest.raises(Inexact, match="sbdlq cannot read its filter"):
        rewrite("s", SubscriptionRule("r", sql="a = 1) OR (b = 2"))
    with pytest.raises(Inexact, match="over Service Bus's 1024"):
        rewrite("s", SubscriptionRule("r", sql=f"a = '{'x' * 1000}'"))


def test_a_rule_of_the_users_named_like_ours_is_refused() -> None:
    from sbdlq.errors import BadInput

    theirs = SubscriptionRules("s", "Active", (SubscriptionRule("sbdlq-target", sql="x = 1"),))
    with pytest.raises(BadInput, match="has a rule named sbdlq-target that sbdlq did not write"):
        enable_steps([theirs])


def test_a_correlation_filter_on_application_properties_needs_the_case_opt_in() -> None:
    """`{"Region": "eu"}` skips `region: eu`; SQL finds `region` under `[Region]`: not exact."""
    rule = SubscriptionRule("r", correlation={"label": "L", "properties": {"Region": "eu", "gone": None}})
    expected = (
        "rule r of subscription s: its correlation filter has no exact SQL equivalent "
        "\\(it matches property Region by the exact case of the name, SQL in any case\\)"
    )
    with pytest.raises(Inexact, match=expected) as refused:
        rewrite("s", rule)
    assert str(refused.value.hint).startswith("add --accept-case-insensitive-names to accept that")
    with pytest.raises(Inexact):
        enable_steps([SubscriptionRules("s", "Active", (rule,))])
    # Accepted: the difference is the case of the name, and only that.
    after = [compile_rule(rewrite("s", rule, accept_case_insensitive_names=True))]
    system = {"Label": "L"}
    assert not takes([compile_rule(rule)], system, {"region": "eu"})
    assert takes(after, system, {"region": "eu"}) and takes(after, system, {"Region": "eu"})
    [_, step] = enable_steps([SubscriptionRules("s", "Active", (rule,))], accept_case_insensitive_names=True)
    assert step.line().endswith("(property names now match in any case: Region)")
    # System fields alone are matched exactly, so they need no opt-in.
    assert original_of(rewrite("s", SubscriptionRule("l", correlation={"label": "L"}))) is not None


def test_a_property_is_tested_for_text_before_it_is_compared() -> None:
    """`[p] = 'v'` on a number may be a FilterException under Service Bus's conversions: the
    `LIKE '%'` type test comes first, so the equality only ever sees text."""
    rule = SubscriptionRule("r", correlation={"label": "L", "properties": {"p": "v", "q": "w"}})
    assert correlation_sql("s", rule, accept_case_insensitive_names=True) == (
        "sys.Label = 'L' AND [p] LIKE '%' AND [p] = 'v' AND [q] LIKE '%' AND [q] = 'w'"
    )


def test_the_whole_topic_is_read_again_after_ten_times_a_read_at_most_30_s() -> None:
    import asyncio

    from support import Clock

    from sbdlq.addresses import EntityPath
    from sbdlq.operations.target_watch import TargetWatch

    clock = Clock(0.0)
    reads: list[float] = []
    target = SubscriptionRule("sbdlq-target", sql="[sbdlq-target] = 's'")
    other = SubscriptionRule("sbdlq-target", sql="[sbdlq-target] = 'o'")
    state = {"rules": (other,)}

    class Rules:
        cost_s = 2.0

        async def subscription_rules(self, topic: EntityPath) -> list[SubscriptionRules]:
            reads.append(clock())
            clock.advance(self.cost_s)
            return [SubscriptionRules("s", "Active", (target,)), SubscriptionRules("o", "Active", state["rules"])]

        async def subscription_names(self, topic: EntityPath) -> list[str]:
            return ["s", "o"]

        async def rules_of(self, subscription: EntityPath) -> tuple[SubscriptionRule, ...]:
            return (target,)

    backend = Rules()
    watch = TargetWatch(backend, EntityPath("t"), "s", hold_lease=False, clock=clock)  # type: ignore[arg-type]

    async def lost() -> str | None:
        stop = await watch.lost()
        watch.failure = None  # each step on its own: a watch stays stopped once stopped
        return stop and stop.split(":")[0]

    async def run() -> list[str | None]:
        await watch.start()  # read at 0, took 2 s: the next one 20 s after it ended, at 22
        out = [await lost()]
        state["rules"] = ()  # o's target rule gone: targeting off
        clock.advance(19.5)
        out.append(await lost())  # not read: still "enabled" as last read
        clock.advance(0.5)
        out.append(await lost())  # read at 22
        state["rules"] = (other,)
        backend.cost_s = 5.0  # a slow read: 50 s, but at most 30 s
        clock.advance(20.0)
        out.append(await lost())  # read at 44, ends at 49
        state["rules"] = ()
        clock.advance(29.5)
        out.append(await lost())
        clock.advance(0.5)
        out.append(await lost())  # read at 79
        return out

    off = "targeted routing is partial on topic t now"
    assert asyncio.run(run()) == [None, None, off, None, None, off]
    assert reads == [0.0, 22.0, 44.0, 79.0]


def test_copies_the_last_check_could_not_confirm_are_strays_of_every_other_subscription() -> None:
    """The topic unreadable after the last chunk: nothing proves where its copies went, so every
    other subscription may hold them, up to the copies since the last whole read."""
    import asyncio

    from support import Clock

    from sbdlq.addresses import EntityPath
    from sbdlq.errors import ServiceUnavailable
    from sbdlq.operations.target_watch import Stray, TargetWatch

    rules = {n: (SubscriptionRule("sbdlq-target", sql=f"[sbdlq-target] = '{n}'"),) for n in ("s", "a", "b")}
    up = [True]

    class Rules:
        async def subscription_rules(self, topic: EntityPath) -> list[SubscriptionRules]:
            if not up[0]:
                raise ServiceUnavailable("admin endpoint unreachable")
            return [SubscriptionRules(n, "Active", r) for n, r in rules.items()]

        async def subscription_names(self, topic: EntityPath) -> list[str]:
            return list(rules)

        async def rules_of(self, subscription: EntityPath) -> tuple[SubscriptionRule, ...]:
            return rules[subscription.subscription or ""]

    watch = TargetWatch(Rules(), EntityPath("t"), "s", hold_lease=False, clock=Clock(0.0))  # type: ignore[arg-type]

    async def run() -> str | None:
        await watch.start()
        for _ in range(3):  # three chunks of 4, each checked (a whole read each: reads take no time)
            assert await watch.lost() is None
            watch.sending(4)
            watch.sent(4)
        up[0] = False
        await watch.finish()
        return watch.failure

    assert asyncio.run(run()) == (
        "cannot read topic t's rules to check targeted routing (admin endpoint unreachable): "
        "stopped before sending more copies"
    )
    assert watch.strays() == [Stray("a", 4, "unverified"), Stray("b", 4, "unverified")]


def test_a_run_cut_short_before_its_last_check_reports_its_last_chunk_as_unverified() -> None:
    """A second Ctrl-C cancels the run at once: its last chunk went out and no check followed."""
    import asyncio

    from support import Clock

    from sbdlq.addresses import EntityPath
    from sbdlq.operations.target_watch import Stray, TargetWatch

    rules = {n: (SubscriptionRule("sbdlq-target", sql=f"[sbdlq-target] = '{n}'"),) for n in ("s", "a")}

    class Rules:
        async def subscription_rules(self, topic: EntityPath) -> list[SubscriptionRules]:
            return [SubscriptionRules(n, "Active", r) for n, r in rules.items()]

        async def subscription_names(self, topic: EntityPath) -> list[str]:
            return list(rules)

        async def rules_of(self, subscription: EntityPath) -> tuple[SubscriptionRule, ...]:
            return rules[subscription.subscription or ""]

    watch = TargetWatch(Rules(), EntityPath("t"), "s", hold_lease=False, clock=Clock(0.0))  # type: ignore[arg-type]

    async def run() -> None:
        await watch.start()
        assert await watch.lost() is None
        watch.sending(4)
        watch.sent(4)
        await watch.close()  # cancelled: finish() never ran

    asyncio.run(run())
    assert watch.strays() == [Stray("a", 4, "unverified")]
