"""Targeted routing on every backend (issue 25): rules read and written through the Backend.

A topic with a SQL filter, a correlation filter, a rule with an action and the default rule
routes 50 varied messages the same before and after `enable-targeted`; a resubmit with
--only-this-subscription reaches only its subscription; `disable-targeted` gives back the
rules exactly as they were.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pytest

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.emulator.engine import Rule
from sbdlq.errors import BadInput
from sbdlq.models import ATTEMPT, RESUBMITTED_FROM, OutboundMessage
from sbdlq.operations.replay import ReplayOptions, replay
from sbdlq.operations.resubmit import resubmit
from sbdlq.operations.targeted import (
    TARGET_PROPERTY,
    apply_steps,
    disable_steps,
    enable_steps,
    read_rules,
    topic_state,
)

if TYPE_CHECKING:
    from pathlib import Path

    from support import Seeder

TOPIC = EntityPath("t")
SUBSCRIPTIONS = ("sql", "corr", "act", "all")


def four_subscriptions(seed: Seeder) -> None:
    """SQL filter, correlation filter, a rule with an action, the default rule."""
    seed.engine.create_topic("t")
    seed.engine.create_subscription("t", "sql", rules=[Rule("eu", sql="region = 'eu' OR n > 3")])
    seed.engine.create_subscription(
        "t", "corr", rules=[Rule("us", correlation={"label": "L", "properties": {"r": "us"}})]
    )
    seed.engine.create_subscription(
        "t", "act", rules=[Rule("x", sql="kind = 'x'", action="SET seen = 'act'; SET n = n + 1")]
    )
    seed.engine.create_subscription("t", "all")


def sample(prefix: str) -> list[OutboundMessage]:
    """50 messages over every combination that matters to the four filters (ids prefix + i)."""
    regions = ("eu", "us", None)
    rs: tuple[Any, ...] = ("us", "US", "eu", 5, None)
    kinds = ("x", "y", None)
    subjects = ("L", "M", None)
    combos = itertools.islice(itertools.cycle(itertools.product(regions, rs, kinds, subjects)), 50)
    out = []
    for i, (region, r, kind, subject) in enumerate(combos):
        props = {k: v for k, v in {"region": region, "r": r, "kind": kind, "n": i % 6}.items() if v is not None}
        out.append(OutboundMessage(body=b"x", message_id=f"{prefix}{i}", subject=subject, application_properties=props))
    return out


def routed(backend: Backend, seed: Seeder, aio: Any, prefix: str) -> dict[str, set[tuple[str, tuple[Any, ...]]]]:
    """Send the sample through the backend; what each subscription got: (number, properties)."""
    aio(backend.send(TOPIC, sample(prefix)))
    got = {}
    for sub in SUBSCRIPTIONS:
        got[sub] = {
            (m.message_id[len(prefix) :], tuple(sorted(m.application_properties.items())))
            for m in seed.drain(f"t/Subscriptions/{sub}")
            if m.message_id
        }
    return got


def enable(backend: Backend, aio: Any) -> int:
    # The sample's property names keep their case: the case opt-in changes none of its routes.
    steps = enable_steps(aio(read_rules(backend, TOPIC)), accept_case_insensitive_names=True)
    aio(apply_steps(backend, TOPIC, steps))
    return len(steps)


def test_targeted_routing_end_to_end(backend: Backend, seed: Seeder, aio: Any) -> None:
    four_subscriptions(seed)
    originals = aio(backend.subscription_rules(TOPIC))
    before = routed(backend, seed, aio, "a")
    assert all(before.values()) and len({frozenset(v) for v in before.values()}) == 4
    assert enable(backend, aio) == 8  # a target rule and one rewrite per subscription
    assert topic_state(TOPIC, aio(read_rules(backend, TOPIC))).state == "enabled"
    assert (
        enable_steps(aio(read_rules(backend, TOPIC)), accept_case_insensitive_names=True) == []
    )  # rerun: nothing left to do
    assert routed(backend, seed, aio, "b") == before

    # Three messages dead-lettered in `act` (after its action ran) go back to `act` alone.
    seed.send(
        "t",
        [
            OutboundMessage(body=b"d", message_id=f"d{i}", application_properties={"kind": "x", "n": i})
            for i in range(3)
        ],
    )
    for sub in ("sql", "corr", "all"):
        seed.drain(f"t/Subscriptions/{sub}")
    act = Address(EntityPath("t", "act"))
    got = seed.engine.receive(act, 10)
    assert seed.engine.dead_letter(act, [m.lock_token for m in got if m.lock_token], "Bad", "broken") == []
    dlq = Address(EntityPath("t", "act"), SubQueue.DEAD_LETTER)
    r = aio(resubmit(backend, dlq, TOPIC, only_this_subscription=True))
    assert (r.selected, r.resubmitted, r.failed) == (3, 3, 0)
    for sub in ("sql", "corr", "all"):
        assert seed.active(f"t/Subscriptions/{sub}") == []
    back = {m.message_id: m.application_properties for m in seed.active("t/Subscriptions/act")}
    assert back == {
        f"d{i}": {
            "kind": "x",
            "n": i + 1,  # the action's work, done once when first delivered, not again
            "seen": "act",
            TARGET_PROPERTY: "act",
            RESUBMITTED_FROM: f"t/Subscriptions/act/$DeadLetterQueue:{m.sequence_number}",
            ATTEMPT: 1,
        }
        for i, m in enumerate(sorted(got, key=lambda m: m.message_id or ""))
    }

    aio(apply_steps(backend, TOPIC, disable_steps(aio(read_rules(backend, TOPIC)))))
    assert aio(backend.subscription_rules(TOPIC)) == originals
    assert topic_state(TOPIC, originals).state == "disabled"


def test_only_this_subscription_needs_targeted_routing(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.topic("t", "billing", "audit")
    seed.dead_letter("t/Subscriptions/billing", 2)
    seed.drain("t/Subscriptions/audit")
    dlq = Address(EntityPath("t", "billing"), SubQueue.DEAD_LETTER)
    for dry_run in (True, False):
        with pytest.raises(BadInput, match="targeted routing is disabled on topic t") as refused:
            aio(resubmit(backend, dlq, TOPIC, only_this_subscription=True, dry_run=dry_run))
        assert refused.value.hint == "run `sbdlq routing enable-targeted t` first"
    assert len(seed.dlq("t/Subscriptions/billing")) == 2
    # Half done (one subscription's target rule only) is refused too.
    steps = enable_steps(aio(read_rules(backend, TOPIC)))
    aio(apply_steps(backend, TOPIC, steps[:1]))
    with pytest.raises(BadInput, match="targeted routing is partial on topic t"):
        aio(resubmit(backend, dlq, TOPIC, only_this_subscription=True))
    aio(apply_steps(backend, TOPIC, enable_steps(aio(read_rules(backend, TOPIC)))))
    r = aio(resubmit(backend, dlq, TOPIC, only_this_subscription=True))
    assert r.resubmitted == 2
    assert seed.ids(seed.active("t/Subscriptions/billing")) == ["m0", "m1"]
    assert seed.active("t/Subscriptions/audit") == []


def test_replay_of_a_subscriptions_export(backend: Backend, seed: Seeder, aio: Any, tmp_path: Path) -> None:
    seed.topic("t", "billing", "audit")
    export = tmp_path / "billing.jsonl"
    import json

    export.write_text("".join(json.dumps(m.to_json()) + "\n" for m in seed.dead_letter("t/Subscriptions/billing", 2)))
    seed.drain("t/Subscriptions/audit")
    # Fan-out refused, dry run or not, before anything is sent.
    for dry_run in (True, False):
        with pytest.raises(BadInput, match=r"more than one subscription: audit \(2 of 2\), billing \(2 of 2\)"):
            aio(replay(backend, export, TOPIC, ReplayOptions(dry_run=dry_run, state=tmp_path / "s")))
    assert seed.active("t/Subscriptions/audit") == [] and seed.active("t/Subscriptions/billing") == []
    enable(backend, aio)
    r = aio(replay(backend, export, TOPIC, ReplayOptions(target_subscription="billing", state=tmp_path / "s")))
    assert r.replayed == 2
    assert seed.ids(seed.active("t/Subscriptions/billing")) == ["m0", "m1"]
    assert seed.active("t/Subscriptions/audit") == []
    # --fan-out: today's behaviour, a copy for every subscription that takes it.
    r = aio(replay(backend, export, TOPIC, ReplayOptions(fan_out=True, state=tmp_path / "s2")))
    assert r.replayed == 2
    assert seed.ids(seed.active("t/Subscriptions/audit")) == ["m0", "m1"]


def _no_manage(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules that may not be read: the admin endpoint's 401 on a namespace (at the SDK), the
    backend's AuthError on the emulator."""
    if backend.name == "servicebus":
        from azure.core.exceptions import HttpResponseError
        from azure.servicebus.management import ServiceBusAdministrationClient

        def unauthorized(*args: Any, **kwargs: Any) -> Any:
            error = HttpResponseError("Unauthorized: Manage claim is required for this operation")
            error.status_code = 401
            raise error

        monkeypatch.setattr(ServiceBusAdministrationClient, "list_rules", unauthorized)
    else:
        from sbdlq.errors import AuthError

        async def refused(*args: Any) -> Any:
            raise AuthError("Unauthorized: Manage claim is required for this operation")

        monkeypatch.setattr(type(backend), "subscription_rules", refused)


def test_without_manage_rights_refused_with_exit_5(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sbdlq.errors import AuthError, ExitStatus

    seed.topic("t", "billing", "audit")
    seed.dead_letter("t/Subscriptions/billing", 1)
    seed.drain("t/Subscriptions/audit")
    _no_manage(backend, monkeypatch)
    dlq = Address(EntityPath("t", "billing"), SubQueue.DEAD_LETTER)
    with pytest.raises(AuthError) as refused:
        aio(resubmit(backend, dlq, TOPIC))
    assert refused.value.exit_status == ExitStatus.AUTH == 5
    assert "--allow-unverified-routing" in str(refused.value.hint) and "--fan-out" in str(refused.value.hint)
    with pytest.raises(AuthError, match="cannot read the rules of topic t's subscriptions"):
        aio(read_rules(backend, TOPIC))
    assert len(seed.dlq("t/Subscriptions/billing")) == 1
    notes: list[str] = []
    r = aio(resubmit(backend, dlq, TOPIC, allow_unverified_routing=True, note=notes.append))
    assert r.resubmitted == 1
    assert any(n.startswith("warning: routing not verified") for n in notes)


def test_enable_disable_restores_every_kind_of_rule_exactly(backend: Backend, seed: Seeder, aio: Any) -> None:
    """Parameters of a filter and of an action, a TrueFilter, a FalseFilter and a SqlFilter whose
    text is a constant's come back exactly, types included, on either backend."""
    seed.engine.create_topic("t")
    seed.engine.create_subscription(
        "t",
        "p",
        rules=[
            Rule("params", sql="region = @r AND n > @min", parameters={"@r": "eu", "@min": 3}),
            Rule(
                "act",
                sql="kind = 'x'",
                action="SET seen = @who; SET n = n + @step",
                action_parameters={"@who": "act", "@step": 2},
            ),
            Rule("yes", sql="1=1", action="SET t = @t", action_parameters={"@t": 1}, constant=True),
            Rule.false("no"),
            Rule("sqltrue", sql="1=1"),  # a SqlFilter, not a TrueFilter
            Rule("sqlfalse", sql="1=0"),
        ],
    )
    originals = aio(backend.subscription_rules(TOPIC))
    [sub] = originals
    assert [r.constant for r in sub.rules] == [None, None, True, False, None, None]
    assert sub.rules[1].action_parameters == {"@who": "act", "@step": 2}
    enable(backend, aio)
    rewritten = aio(backend.subscription_rules(TOPIC))
    assert topic_state(TOPIC, rewritten).state == "enabled"
    assert [r.action_parameters for r in rewritten[0].rules[:3]] == [None, {"@who": "act", "@step": 2}, {"@t": 1}]
    aio(apply_steps(backend, TOPIC, disable_steps(rewritten)))
    assert aio(backend.subscription_rules(TOPIC)) == originals


def test_a_rule_changed_since_the_plan_is_never_overwritten(backend: Backend, seed: Seeder, aio: Any) -> None:
    from sbdlq.errors import ExitStatus, RuleChanged

    seed.engine.create_topic("t")
    seed.engine.create_subscription("t", "a", rules=[Rule("one", sql="n = 1")])
    seed.engine.create_subscription("t", "b", rules=[Rule("two", sql="n = 2")])
    steps = enable_steps(aio(read_rules(backend, TOPIC)))
    # Between the plan (or its prompt) and the writes, someone edits rule `two`.
    seed.engine.add_rule("t/Subscriptions/b", Rule("two", sql="n = 22"), replace=True)
    with pytest.raises(RuleChanged) as stopped:
        aio(apply_steps(backend, TOPIC, steps))
    assert stopped.value.line() == "rule two of t/Subscriptions/b changed since the plan; run again"
    assert stopped.value.exit_status == ExitStatus.FAILED
    assert seed.engine.rules("t/Subscriptions/b")[0] == Rule("two", sql="n = 22")  # theirs, kept
    assert topic_state(TOPIC, aio(read_rules(backend, TOPIC))).state == "partial"
    aio(apply_steps(backend, TOPIC, enable_steps(aio(read_rules(backend, TOPIC)))))  # run again: done
    rules = aio(read_rules(backend, TOPIC))
    assert topic_state(TOPIC, rules).state == "enabled"

    # Enabling again after disabling: someone names a rule of theirs sbdlq-target meanwhile.
    aio(apply_steps(backend, TOPIC, disable_steps(rules)))
    steps = enable_steps(aio(read_rules(backend, TOPIC)))
    seed.engine.add_rule("t/Subscriptions/a", Rule("sbdlq-target", sql="theirs = 1"))
    with pytest.raises(RuleChanged, match=r"^rule sbdlq-target of t/Subscriptions/a changed since the plan"):
        aio(apply_steps(backend, TOPIC, steps))
    assert [r.sql for r in seed.engine.rules("t/Subscriptions/a")] == ["n = 1", "theirs = 1"]
    seed.engine.remove_rule("t/Subscriptions/a", "sbdlq-target")
    aio(apply_steps(backend, TOPIC, enable_steps(aio(read_rules(backend, TOPIC)))))
    rules = aio(read_rules(backend, TOPIC))

    # Disabling: a rewritten rule removed, and a target rule replaced, since the plan.
    steps = disable_steps(rules)
    seed.engine.remove_rule("t/Subscriptions/a", "one")
    with pytest.raises(RuleChanged, match=r"^rule one of t/Subscriptions/a changed since the plan; run again$"):
        aio(apply_steps(backend, TOPIC, steps))
    steps = disable_steps(aio(read_rules(backend, TOPIC)))
    seed.engine.add_rule("t/Subscriptions/b", Rule("sbdlq-target", sql="mine = 1"), replace=True)
    with pytest.raises(RuleChanged, match=r"^rule sbdlq-target of t/Subscriptions/b changed since the plan"):
        aio(apply_steps(backend, TOPIC, steps))
    assert [r.sql for r in seed.engine.rules("t/Subscriptions/b")] == ["n = 22", "mine = 1"]  # theirs kept


def test_only_this_subscription_stops_when_targeting_is_turned_off_mid_run(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support import Clock
    from support.targeting import after_check

    from sbdlq.operations import target_watch

    # A clock that never moves: every read takes no time, so every batch reads the rules again.
    monkeypatch.setattr(target_watch, "monotonic", Clock(0.0))
    seed.topic("t", "billing", "audit")
    seed.dead_letter("t/Subscriptions/billing", 6)
    seed.drain("t/Subscriptions/audit")
    enable(backend, aio)

    async def turn_half_off() -> None:
        # Once the first copy may go, someone turns targeting half off: audit's target rule goes.
        seed.engine.remove_rule("t/Subscriptions/audit", "sbdlq-target")

    after_check(monkeypatch, 1, turn_half_off)
    dlq = Address(EntityPath("t", "billing"), SubQueue.DEAD_LETTER)
    r = aio(resubmit(backend, dlq, TOPIC, only_this_subscription=True, batch_size=1, concurrency=1))
    assert (r.selected, r.resubmitted, r.failed, r.not_tried) == (6, 1, 0, 5)  # never tried: still in the DLQ
    assert r.errors[-1].startswith(
        "targeted routing is partial on topic t now: stopped before sending more copies (the rest stay in the DLQ)"
    )
    assert len(seed.active("t/Subscriptions/billing")) == 1
    assert len(seed.dlq("t/Subscriptions/billing")) == 5  # nothing lost
    assert seed.active("t/Subscriptions/audit") == []  # its rewritten rule still left tagged copies alone
    assert r.stray_copies == [{"subscription": "audit", "at_most": 1, "cause": "changed"}]


def test_replay_only_subscription_stops_when_targeting_is_turned_off_mid_run(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    from support import Clock
    from support.targeting import after_check

    from sbdlq.operations import target_watch

    monkeypatch.setattr(target_watch, "monotonic", Clock(0.0))  # every chunk reads the rules again
    seed.topic("t", "billing", "audit")
    export = tmp_path / "billing.jsonl"
    export.write_text("".join(json.dumps(m.to_json()) + "\n" for m in seed.dead_letter("t/Subscriptions/billing", 4)))
    seed.drain("t/Subscriptions/audit")
    enable(backend, aio)

    async def turn_half_off() -> None:
        seed.engine.remove_rule("t/Subscriptions/audit", "sbdlq-target")

    after_check(monkeypatch, 1, turn_half_off)
    options = ReplayOptions(target_subscription="billing", concurrency=1, state=tmp_path / "s")
    r = aio(replay(backend, export, TOPIC, options))
    assert (r.selected, r.replayed, r.failed, r.not_tried) == (4, 1, 0, 3)
    assert r.errors[-1].startswith("targeted routing is partial on topic t now: stopped before sending more copies")
    assert len(seed.active("t/Subscriptions/billing")) == 1
    assert seed.active("t/Subscriptions/audit") == []
    assert r.stray_copies == [{"subscription": "audit", "at_most": 1, "cause": "changed"}]
