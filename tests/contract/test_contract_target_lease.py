"""A targeted run against what can change under it, on every backend (issue 34, items 3 and 4).

`routing disable-targeted` while `resubmit --only-this-subscription` runs is refused: the run
holds a lease on the topic's targeted routing (a rule that takes no message). `--force` takes
it over; the run stops before its next chunk. A subscription created during the run (its
default rule takes everything) stops the run before its next chunk. Each change is injected
right after the check of chunk N passed, so chunk N goes out under the change: then the store
shows where every copy went, and the report names each subscription that may hold one with a
bound that covers what it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from support.targeting import after_check

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.operations import target_watch
from sbdlq.operations.lease import LEASE_PREFIX, RoutingLeased, now_utc
from sbdlq.operations.replay import ReplayOptions, replay
from sbdlq.operations.resubmit import resubmit
from sbdlq.operations.targeted import (
    apply_steps,
    disable_leased,
    disable_plan,
    enable_steps,
    read_rules,
    topic_state,
)
from sbdlq.results import ResubmitResult

if TYPE_CHECKING:
    from pathlib import Path

    from support import Seeder

TOPIC = EntityPath("t")
DLQ = Address(EntityPath("t", "billing"), SubQueue.DEAD_LETTER)
MESSAGES = 12
CHUNK = 2  # --batch-size and --concurrency: one chunk in flight, of two copies


def _topic(seed: Seeder, backend: Backend, aio: Any) -> None:
    """billing and audit, both taking everything; 12 in billing's DLQ; targeted routing enabled."""
    seed.topic("t", "billing", "audit")
    seed.dead_letter("t/Subscriptions/billing", MESSAGES)
    seed.drain("t/Subscriptions/audit")
    aio(apply_steps(backend, TOPIC, enable_steps(aio(read_rules(backend, TOPIC)))))


def _run(backend: Backend, aio: Any) -> ResubmitResult:
    return aio(resubmit(backend, DLQ, TOPIC, only_this_subscription=True, batch_size=CHUNK, concurrency=CHUNK))


def _leases(seed: Seeder) -> list[str]:
    """The lease rules left on the topic's subscriptions."""
    return [
        rule.name
        for e in seed.engine.list_entities()
        if e.kind == "subscription" and e.path.startswith("t/")
        for rule in seed.engine.rules(e.path)
        if rule.name.startswith(LEASE_PREFIX)
    ]


def test_disable_targeted_during_a_run_is_refused_and_nothing_strays(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topic(seed, backend, aio)
    refused: list[RoutingLeased] = []

    async def disable() -> None:
        try:
            disable_plan(TOPIC, await read_rules(backend, TOPIC), now_utc(), force=False)
        except RoutingLeased as exc:
            refused.append(exc)

    after_check(monkeypatch, 2, disable)
    r = _run(backend, aio)
    [refusal] = refused
    assert refusal.exit_status == 1
    assert refusal.message.startswith("targeted routing on topic t is in use by a targeted run (")
    assert "on subscription billing, until " in refusal.message
    assert refusal.hint is not None and "--force if its holder died" in refusal.hint
    assert (r.selected, r.resubmitted, r.not_tried, r.stray_copies) == (MESSAGES, MESSAGES, 0, [])
    assert len(seed.active("t/Subscriptions/billing")) == MESSAGES
    assert seed.active("t/Subscriptions/audit") == []
    assert topic_state(TOPIC, aio(read_rules(backend, TOPIC))).state == "enabled"
    assert _leases(seed) == []  # given back at the end


def test_a_race_with_the_disable_after_its_plan_is_refused_too(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disable read its plan before the run took its lease: its second read, after writing its
    own lease, sees the run's and refuses; nothing changed, nothing strays."""
    _topic(seed, backend, aio)
    plan = disable_plan(TOPIC, aio(read_rules(backend, TOPIC)), now_utc(), force=False)  # no lease yet
    refused: list[RoutingLeased] = []

    async def disable() -> None:
        try:
            await disable_leased(backend, TOPIC, plan, force=False)
        except RoutingLeased as exc:
            refused.append(exc)

    after_check(monkeypatch, 1, disable)
    r = _run(backend, aio)
    assert len(refused) == 1
    assert (r.resubmitted, r.stray_copies) == (MESSAGES, [])
    assert seed.active("t/Subscriptions/audit") == []
    assert topic_state(TOPIC, aio(read_rules(backend, TOPIC))).state == "enabled"
    assert _leases(seed) == []  # the disable's own lease went too


def test_force_takes_the_lease_over_and_the_run_reports_the_chunk_that_strayed(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topic(seed, backend, aio)

    async def force() -> None:
        plan = disable_plan(TOPIC, await read_rules(backend, TOPIC), now_utc(), force=True)
        assert len(plan.forced) == 1
        await disable_leased(backend, TOPIC, plan, force=True)

    after_check(monkeypatch, 3, force)
    r = _run(backend, aio)
    # Two chunks went under targeted routing, the third after the disable: then the run stopped.
    assert (r.selected, r.resubmitted, r.not_tried) == (MESSAGES, 3 * CHUNK, MESSAGES - 3 * CHUNK)
    assert r.errors[0].startswith("this run's lease on topic t's targeted routing was taken over or removed")
    audit = seed.active("t/Subscriptions/audit")
    assert len(audit) == CHUNK  # the third chunk's copies, and only those
    strays = {s["subscription"]: s for s in r.stray_copies}
    assert strays["audit"]["cause"] == "changed" and CHUNK <= strays["audit"]["at_most"] <= 3 * CHUNK
    assert "billing" not in strays  # its own rule, restored, takes everything: no copy missed it
    assert len(seed.dlq("t/Subscriptions/billing")) == MESSAGES - 3 * CHUNK  # nothing lost
    assert len(seed.active("t/Subscriptions/billing")) == 3 * CHUNK
    assert r.left_over() is not None and "audit (at most" in (r.left_over() or "")
    assert topic_state(TOPIC, aio(read_rules(backend, TOPIC))).state == "disabled"
    assert _leases(seed) == []


def test_a_subscription_created_during_the_run_stops_it_and_is_named(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topic(seed, backend, aio)

    async def create() -> None:
        seed.engine.create_subscription("t", "late")  # another team's `az`: the default rule, everything

    after_check(monkeypatch, 2, create)
    r = _run(backend, aio)
    assert (r.selected, r.resubmitted, r.not_tried) == (MESSAGES, 2 * CHUNK, MESSAGES - 2 * CHUNK)
    assert r.errors[0] == (
        "subscription(s) late appeared on topic t during the run: stopped before sending more copies "
        "(the rest stay in the DLQ)"
    )
    assert len(seed.active("t/Subscriptions/late")) == CHUNK  # the second chunk's copies
    assert r.stray_copies == [{"subscription": "late", "at_most": CHUNK, "cause": "created"}]
    assert seed.active("t/Subscriptions/audit") == []
    assert len(seed.dlq("t/Subscriptions/billing")) == MESSAGES - 2 * CHUNK
    assert _leases(seed) == []


def test_a_subscription_created_after_the_last_chunk_is_caught_by_the_last_check(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topic(seed, backend, aio)

    async def create() -> None:
        seed.engine.create_subscription("t", "late")

    after_check(monkeypatch, MESSAGES // CHUNK, create)  # the last chunk's check
    r = _run(backend, aio)
    assert (r.resubmitted, r.not_tried) == (MESSAGES, 0)
    assert len(seed.active("t/Subscriptions/late")) == CHUNK
    assert r.stray_copies == [{"subscription": "late", "at_most": CHUNK, "cause": "created"}]
    assert r.left_over() == (
        "copies meant only for t/Subscriptions/billing may also be in subscription(s) late (at most 2: created "
        "during the run); they carry sbdlq-target=billing"
    )


def test_replay_only_subscription_stops_on_a_new_subscription(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    seed.topic("t", "billing", "audit")
    export = tmp_path / "billing.jsonl"
    export.write_text("".join(json.dumps(m.to_json()) + "\n" for m in seed.dead_letter("t/Subscriptions/billing", 6)))
    seed.drain("t/Subscriptions/audit")
    aio(apply_steps(backend, TOPIC, enable_steps(aio(read_rules(backend, TOPIC)))))

    async def create() -> None:
        seed.engine.create_subscription("t", "late")

    after_check(monkeypatch, 2, create)
    options = ReplayOptions(target_subscription="billing", concurrency=CHUNK, state=tmp_path / "s")
    r = aio(replay(backend, export, TOPIC, options))
    assert (r.selected, r.replayed, r.not_tried) == (6, 2 * CHUNK, 6 - 2 * CHUNK)
    assert len(seed.active("t/Subscriptions/late")) == CHUNK
    assert r.stray_copies == [{"subscription": "late", "at_most": CHUNK, "cause": "created"}]
    assert _leases(seed) == []


def test_a_run_refuses_while_a_disable_holds_its_lease(backend: Backend, seed: Seeder, aio: Any) -> None:
    """The other half of the race: a disable wrote its lease first; the run, after writing its own,
    reads the rules again, sees it, gives its lease back and sends nothing."""
    from datetime import timedelta

    from sbdlq.emulator.engine import Rule
    from sbdlq.operations.lease import DISABLE, lease_rule

    _topic(seed, backend, aio)
    marker = lease_rule("d1", DISABLE, "ops-box pid 9", now_utc() + timedelta(seconds=60))
    seed.engine.add_rule("t/Subscriptions/audit", Rule(marker.name, sql=marker.sql))
    with pytest.raises(RoutingLeased, match=r"^targeted routing on topic t is being disabled by a disable-targeted"):
        _run(backend, aio)
    assert len(seed.dlq("t/Subscriptions/billing")) == MESSAGES
    assert _leases(seed) == [marker.name]  # the run's own lease given back, the disable's kept


def test_the_lease_is_renewed_while_the_run_sends_and_lost_when_taken(backend: Backend, seed: Seeder, aio: Any) -> None:
    """Every RENEW_S the check renews the lease (its end moves on, on the broker); removed by
    someone else, the next check stops the run and the chunk before it is unconfirmed."""
    from datetime import timedelta

    from sbdlq.operations.lease import RENEW_S, leases_in

    _topic(seed, backend, aio)
    now = [now_utc()]
    watch = target_watch.TargetWatch(backend, TOPIC, "billing", hold_lease=True, wall=lambda: now[0])

    async def lease_until() -> Any:
        [lease] = leases_in(await read_rules(backend, TOPIC))
        return lease.until

    async def chunk() -> None:
        watch.sending(2)
        watch.sent(2)  # the next check begins now

    async def run() -> list[Any]:
        out: list[Any] = []
        await watch.start()
        first = await lease_until()
        out.append(await watch.lost())
        out.append(await lease_until() == first)  # not due yet
        now[0] += timedelta(seconds=RENEW_S + 1)
        await chunk()
        out.append(await watch.lost())
        out.append(await lease_until() - first)  # renewed at that check
        await chunk()
        [name] = _leases(seed)
        await watch.lost()  # the check begun after that chunk passed
        seed.engine.remove_rule("t/Subscriptions/billing", name)  # disable-targeted --force, elsewhere
        await chunk()
        out.append(await watch.lost())
        out.append(await watch.lost())  # stays stopped
        await watch.finish()
        return out

    stop = (
        "this run's lease on topic t's targeted routing was taken over or removed: stopped before sending more copies"
    )
    assert aio(run()) == [None, True, None, timedelta(seconds=RENEW_S + 1), stop, stop]
    assert watch.strays() == []  # every other subscription still targeted when read after it
    assert (watch.tried, watch.chunk_confirmed) == (6, 4)  # the last chunk unconfirmed
    assert _leases(seed) == []


def test_force_on_a_subscription_whose_own_rule_is_selective_reports_copies_that_may_have_missed_it(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """billing takes `amount > 100` only: once disabled under the run, a copy reaches it by that
    rule alone, which nothing checked: the chunk sent then may have missed it (here it did not)."""
    from sbdlq.emulator.engine import Rule
    from sbdlq.models import OutboundMessage

    seed.engine.create_topic("t")
    seed.engine.create_subscription("t", "billing", rules=[Rule("big", sql="amount > 100")])
    seed.engine.create_subscription("t", "audit")
    seed.send(
        "t", [OutboundMessage(body=b"x", message_id=f"m{i}", application_properties={"amount": 500}) for i in range(6)]
    )
    seed.drain("t/Subscriptions/audit")
    billing = Address(EntityPath("t", "billing"))
    got = seed.engine.receive(billing, 6)
    seed.engine.dead_letter(billing, [m.lock_token or "" for m in got], "Bad", "broken")
    aio(apply_steps(backend, TOPIC, enable_steps(aio(read_rules(backend, TOPIC)))))

    async def force() -> None:
        plan = disable_plan(TOPIC, await read_rules(backend, TOPIC), now_utc(), force=True)
        await disable_leased(backend, TOPIC, plan, force=True)

    after_check(monkeypatch, 2, force)
    r = _run(backend, aio)
    assert (r.resubmitted, r.not_tried) == (2 * CHUNK, 6 - 2 * CHUNK)
    strays = {s["subscription"]: s for s in r.stray_copies}
    assert strays["billing"] == {"subscription": "billing", "at_most": CHUNK, "cause": "missed"}
    assert len(seed.active("t/Subscriptions/audit")) == CHUNK <= strays["audit"]["at_most"]
    assert len(seed.active("t/Subscriptions/billing")) == 2 * CHUNK  # amount 500: its rule took them
    assert "up to 2 copies may have missed t/Subscriptions/billing (its targeted routing changed during the run)" in (
        r.left_over() or ""
    )


def test_a_renewal_whose_answer_was_lost_keeps_the_lease(
    backend: Backend, seed: Seeder, aio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The renewal reached the broker, its answer did not: the next check finds the lease renewed,
    by this run (only it writes that name), and goes on; the run's lease is given back at the end."""
    from datetime import timedelta

    from sbdlq.errors import TransientError
    from sbdlq.operations.lease import RENEW_S

    _topic(seed, backend, aio)
    now = [now_utc()]
    watch = target_watch.TargetWatch(backend, TOPIC, "billing", hold_lease=True, wall=lambda: now[0])
    real = backend.update_rule

    async def answer_lost(*args: Any, **kwargs: Any) -> None:
        await real(*args, **kwargs)
        raise TransientError("connection reset while reading the answer")

    async def run() -> list[Any]:
        await watch.start()
        now[0] += timedelta(seconds=RENEW_S + 1)
        monkeypatch.setattr(backend, "update_rule", answer_lost)
        out = [await watch.lost()]  # the renewal's answer lost: the lease lasts long enough for this chunk
        monkeypatch.setattr(backend, "update_rule", real)
        out.append(await watch.lost())  # the renewed lease found, and taken as the run's own
        await watch.finish()
        return out

    assert aio(run()) == [None, None]
    assert watch.failure is None
    assert _leases(seed) == []
