"""The routing check of resubmit on every backend: rules read through the Backend, unroutable copies kept."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.emulator.engine import Rule
from sbdlq.errors import BadInput, EntityNotFound
from sbdlq.models import OutboundMessage, SubscriptionRule, SubscriptionRules
from sbdlq.operations.resubmit import resubmit

if TYPE_CHECKING:
    from support import Seeder


def test_subscription_rules_lists_sql_correlation_and_default_rules(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.topic("t", "s", rules=[Rule("new", sql="status = 'new'", action="SET status = 'routed'")])
    seed.engine.create_subscription("t", "c", rules=[Rule("us", correlation={"label": "L", "properties": {"r": "us"}})])
    seed.engine.create_subscription("t", "all")
    got = {s.subscription: s for s in aio(backend.subscription_rules(EntityPath("t")))}
    assert got["s"] == SubscriptionRules(
        "s", "Active", (SubscriptionRule("new", sql="status = 'new'", action="SET status = 'routed'"),)
    )
    (corr,) = got["c"].rules
    assert corr.correlation is not None
    assert {k: v for k, v in corr.correlation.items() if v} == {"label": "L", "properties": {"r": "us"}}
    assert [(r.name, r.sql, r.action) for r in got["all"].rules] == [("$Default", "1=1", None)]


def test_subscription_rules_of_a_missing_topic(backend: Backend, seed: Seeder, aio: Any) -> None:
    with pytest.raises(EntityNotFound):
        aio(backend.subscription_rules(EntityPath("nope")))


def test_resubmit_keeps_the_copies_no_subscription_takes(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    seed.topic("T", "eu", rules=[Rule("eu", sql="region = 'eu'")])
    seed.dead_letter(
        "q", [OutboundMessage(body=b"x", message_id=g, application_properties={"region": g}) for g in ("eu", "us")]
    )
    r = aio(resubmit(backend, Address(EntityPath("q"), SubQueue.DEAD_LETTER), EntityPath("T")))
    assert (r.selected, r.resubmitted, r.unroutable, r.failed) == (2, 1, 1, 0)
    assert [m.message_id for m in seed.dlq("q")] == ["us"]
    assert [m.message_id for m in seed.active("T/Subscriptions/eu")] == ["eu"]


def test_resubmit_of_a_subscription_dlq_whose_copies_would_miss_it_is_refused(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    seed.topic("t", "s", rules=[Rule("new", sql="status = 'new'", action="SET status = 'routed'")])
    seed.dead_letter("t/Subscriptions/s", [OutboundMessage(body=b"x", application_properties={"status": "new"})])
    source = Address(EntityPath("t", "s"), SubQueue.DEAD_LETTER)
    with pytest.raises(BadInput, match="would not reach subscription s"):
        aio(resubmit(backend, source, EntityPath("t")))
    assert len(seed.dlq("t/Subscriptions/s")) == 1


def test_rule_parameters_and_true_false_filters_reach_the_routing_check(
    backend: Backend, seed: Seeder, aio: Any
) -> None:
    """Both backends read a rule's `@parameters` and the TrueFilter / FalseFilter types, and route with them."""
    rule = Rule("eu", sql="region = @region", parameters={"@region": "eu"}, action="SET by = @by",
                action_parameters={"@by": "rule"})  # fmt: skip
    seed.queue("q")
    seed.topic("T", "eu", rules=[rule, Rule.false("never")])
    got = {s.subscription: s for s in aio(backend.subscription_rules(EntityPath("T")))}
    listed = [(r.name, r.constant, r.parameters, r.action_parameters) for r in got["eu"].rules]
    assert listed == [("eu", None, {"@region": "eu"}, {"@by": "rule"}), ("never", False, None, None)]
    seed.dead_letter(
        "q", [OutboundMessage(body=b"x", message_id=g, application_properties={"region": g}) for g in ("eu", "us")]
    )
    r = aio(resubmit(backend, Address(EntityPath("q"), SubQueue.DEAD_LETTER), EntityPath("T")))
    assert (r.selected, r.resubmitted, r.unroutable, r.failed) == (2, 1, 1, 0)
    assert [m.message_id for m in seed.active("T/Subscriptions/eu")] == ["eu"]
