"""`sbdlq routing status | enable-targeted | disable-targeted`, and the copy commands' targeting
options, at the CLI boundary: exact output, exit codes, nothing changed when refused (issue 25)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import Cli

from sbdlq.addresses import Address, EntityPath
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.models import OutboundMessage


@pytest.fixture
def topic(engine: Engine) -> Engine:
    engine.create_topic("t")
    engine.create_subscription("t", "billing", rules=[Rule("big", sql="amount > 100", action="SET big = TRUE")])
    engine.create_subscription("t", "audit")
    return engine


def _rules(engine: Engine) -> dict[str, list[Rule]]:
    return {s: engine.rules(f"t/Subscriptions/{s}") for s in ("billing", "audit")}


def test_status_enable_disable(topic: Engine, cli: Cli) -> None:
    originals = _rules(topic)
    r = cli("routing", "status", "t")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [
        "topic t: targeted routing disabled",
        "subscription  state  rules  rewritten  target_rule",
        "audit         off    1      0          false",
        "billing       off    1      0          false",
    ]
    plan = [
        "plan: 4 rule change(s) on topic t:",
        "  audit: rule sbdlq-target: add, filter [sbdlq-target] = 'audit'",
        "  audit: rule $Default: filter 1=1 -> [sbdlq-target] IS NULL AND (1=1)",
        "  billing: rule sbdlq-target: add, filter [sbdlq-target] = 'billing'",
        "  billing: rule big: filter amount > 100 -> [sbdlq-target] IS NULL AND (amount > 100) "
        "(action kept: SET big = TRUE)",
    ]
    r = cli("routing", "enable-targeted", "t", "--dry-run")
    assert (r.exit_code, r.stdout.splitlines()) == (0, [*plan, "dry run: nothing changed"])
    r = cli("routing", "enable-targeted", "t")  # stdin is no terminal: --yes needed
    assert r.exit_code == 2
    assert r.stderr == "sbdlq: this changes the topic's rules: add --yes (stdin is not a terminal)\n"
    assert _rules(topic) == originals
    r = cli("routing", "enable-targeted", "t", "--yes")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines() == [
        *plan,
        "targeted routing enabled on topic t: 4 rule change(s); each rewritten rule keeps its original in its "
        "filter: `sbdlq routing disable-targeted t` restores them",
    ]
    assert json.loads(cli("routing", "status", "t", "-o", "json").stdout)["state"] == "enabled"
    r = cli("routing", "enable-targeted", "t", "--yes")
    assert r.stdout == "targeted routing is already enabled on topic t: nothing to change\n"
    r = cli("routing", "disable-targeted", "t", "--yes")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "targeted routing disabled on topic t: 4 rule change(s)"
    assert _rules(topic) == originals


def test_a_correlation_filter_without_an_exact_sql_equivalent_is_refused(engine: Engine, cli: Cli) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "ok")
    engine.create_subscription("t", "n", rules=[Rule("count", correlation={"properties": {"n": 5}})])
    r = cli("routing", "enable-targeted", "t", "--yes")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (
        "sbdlq: rule count of subscription n: its correlation filter has no exact SQL equivalent "
        "(property n = 5 is not text) (change the rule to a SQL filter, or resubmit --to a queue)\n"
    )
    assert [r.name for r in engine.rules("t/Subscriptions/ok")] == ["$Default"]  # nothing changed


def test_a_correlation_filter_on_properties_needs_the_case_opt_in(engine: Engine, cli: Cli) -> None:
    """Correlation `{"Region": "eu"}` skips `region: eu`; its SQL rewrite would take it."""
    engine.create_topic("t")
    engine.create_subscription("t", "ok")
    engine.create_subscription("t", "eu", rules=[Rule("region", correlation={"properties": {"Region": "eu"}})])
    originals = engine.rules("t/Subscriptions/eu")
    for dry in ([], ["--dry-run"]):
        r = cli("routing", "enable-targeted", "t", "--yes", *dry)
        assert (r.exit_code, r.stdout) == (2, "")
        assert r.stderr == (
            "sbdlq: rule region of subscription eu: its correlation filter has no exact SQL equivalent "
            "(it matches property Region by the exact case of the name, SQL in any case) "
            "(add --accept-case-insensitive-names to accept that, change the rule to a SQL filter, "
            "or resubmit --to a queue)\n"
        )
    assert [r.name for r in engine.rules("t/Subscriptions/ok")] == ["$Default"]  # nothing changed
    r = cli("routing", "enable-targeted", "t", "--yes", "--accept-case-insensitive-names")
    assert r.exit_code == 0, r.stderr
    assert (
        '  eu: rule region: filter correlation {"properties": {"Region": "eu"}} -> \'sbdlq-correlation '
        '{"properties":{"Region":"eu"}}\' <> \'\' AND [sbdlq-target] IS NULL AND ([Region] LIKE \'%\' AND '
        "[Region] = 'eu') (property names now match in any case: Region)"
    ) in r.stdout.splitlines()
    assert cli("routing", "disable-targeted", "t", "--yes").exit_code == 0
    assert engine.rules("t/Subscriptions/eu") == originals


def test_a_rule_changed_after_the_plan_stops_the_run(topic: Engine, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Someone edits rule `big` while the plan is on screen: it is not overwritten, exit 1."""
    from sbdlq.operations import targeted

    read = targeted.read_rules

    async def read_then_edit(backend: object, path: EntityPath) -> object:
        rules = await read(backend, path)  # type: ignore[arg-type]
        topic.add_rule("t/Subscriptions/billing", Rule("big", sql="amount > 1000"), replace=True)
        return rules

    monkeypatch.setattr(targeted, "read_rules", read_then_edit)
    r = cli("routing", "enable-targeted", "t", "--yes")
    assert r.exit_code == 1
    assert r.stderr.splitlines()[-1] == "sbdlq: rule big of t/Subscriptions/billing changed since the plan; run again"
    assert topic.rules("t/Subscriptions/billing")[0] == Rule("big", sql="amount > 1000")


def test_bad_targets(engine: Engine, cli: Cli) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s")
    r = cli("routing", "status", "t/Subscriptions/s")
    assert (r.exit_code, r.stderr) == (2, "sbdlq: 't/Subscriptions/s' is a subscription; name its topic\n")
    assert cli("routing", "status", "nope").exit_code == 4


def test_without_manage_rights_exit_5(topic: Engine, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from sbdlq.backends.emulator import EmulatorBackend
    from sbdlq.errors import AuthError

    async def refused(self: EmulatorBackend, topic: object) -> None:
        raise AuthError("Unauthorized: Manage claim required")

    monkeypatch.setattr(EmulatorBackend, "subscription_rules", refused)
    r = cli("routing", "enable-targeted", "t", "--yes")
    assert r.exit_code == 5
    assert r.stderr == (
        "sbdlq: cannot read the rules of topic t's subscriptions (Unauthorized: Manage claim required) "
        "(reading and changing rules needs a key with Manage rights)\n"
    )


def _dead_letter_billing(engine: Engine, n: int) -> None:
    from sbdlq.models import OutboundMessage

    engine.send(
        "t", [OutboundMessage(body=b"x", message_id=f"m{i}", application_properties={"amount": 500}) for i in range(n)]
    )
    audit = Address(EntityPath("t", "audit"))
    engine.complete(audit, [m.lock_token or "" for m in engine.receive(audit, n)])
    billing = Address(EntityPath("t", "billing"))
    got = engine.receive(billing, n)
    engine.dead_letter(billing, [m.lock_token or "" for m in got], "Bad", "broken")


def test_resubmit_only_this_subscription(topic: Engine, cli: Cli) -> None:
    _dead_letter_billing(topic, 2)
    r = cli("resubmit", "t/Subscriptions/billing", "--only-this-subscription", "--dry-run")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (
        "sbdlq: targeted routing is disabled on topic t: a copy meant for one subscription could reach others "
        "(run `sbdlq routing enable-targeted t` first)\n"
    )
    assert cli("routing", "enable-targeted", "t", "--yes").exit_code == 0
    r = cli("resubmit", "t/Subscriptions/billing", "--only-this-subscription", "--fan-out")
    assert r.exit_code == 2 and "contradict" in r.stderr
    r = cli("resubmit", "t/Subscriptions/billing", "--only-this-subscription", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["resubmitted"] == 2
    assert topic.counts("t/Subscriptions/billing").active == 2
    assert topic.counts("t/Subscriptions/audit").active == 0
    (copy, _) = topic.peek(Address(EntityPath("t", "billing")), 0, 10)
    assert copy.application_properties["sbdlq-target"] == "billing"
    assert copy.application_properties["big"] is True  # the action's work kept, as dead-lettered


def test_resubmit_only_this_subscription_stops_when_targeting_goes(
    topic: Engine, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Targeted routing turned half off during the run (read again before each batch): exit 1,
    an honest summary naming the subscription that may hold a copy, and the originals not sent
    stay in the DLQ."""
    from support import Clock

    from sbdlq.operations import target_watch

    _dead_letter_billing(topic, 3)
    assert cli("routing", "enable-targeted", "t", "--yes").exit_code == 0
    monkeypatch.setattr(target_watch, "monotonic", Clock(0.0))  # reads take no time: one per batch
    read, reads = target_watch.read_rules, []

    async def read_then_disable(backend: object, path: EntityPath) -> object:
        reads.append(path)
        if len(reads) == 2:  # the first batch's read, then: someone disables audit's target rule
            topic.remove_rule("t/Subscriptions/audit", "sbdlq-target")
        return await read(backend, path)  # type: ignore[arg-type]

    monkeypatch.setattr(target_watch, "read_rules", read_then_disable)
    r = cli("resubmit", "t/Subscriptions/billing", "--only-this-subscription", "--batch-size", "1", "-o", "json")
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["selected"], doc["resubmitted"], doc["failed"], doc["not_tried"]) == (3, 1, 0, 2)
    # The one copy sent before the change was seen: audit may hold it (it does not: the copy went first).
    assert doc["stray_copies"] == [{"subscription": "audit", "at_most": 1, "cause": "changed"}]
    assert r.stderr.splitlines()[-1] == (
        "sbdlq: targeted routing is partial on topic t now: stopped before sending more copies (the rest stay in "
        "the DLQ); 2 message(s) were not resubmitted and remain in the queue; copies meant only for "
        "t/Subscriptions/billing may also be in subscription(s) audit (at most 1: its targeted routing changed "
        "during the run); they carry sbdlq-target=billing; run the command again to retry"
    )
    assert topic.counts("t/Subscriptions/billing").dead_letter == 2
    assert topic.counts("t/Subscriptions/audit").active == 0
    assert [r.name for r in topic.rules("t/Subscriptions/billing")] == ["big", "sbdlq-target"]  # lease given back


def test_replay_fan_out_refused_then_fan_out(topic: Engine, cli: Cli, tmp_path: Path) -> None:
    _dead_letter_billing(topic, 2)
    export = tmp_path / "billing.jsonl"
    r = cli("purge", "t/Subscriptions/billing", "--export", str(export), "--yes")
    assert r.exit_code == 0, r.stderr
    for dry in (["--dry-run"], []):
        r = cli("replay", str(export), "--to", "t", *dry)
        assert (r.exit_code, r.stdout) == (2, "")
        assert r.stderr == (
            f"sbdlq: replaying {export} to topic t would give copies to more than one subscription: audit (2 of 2), "
            "billing (2 of 2) (add --only-subscription SUB (after `sbdlq routing enable-targeted TOPIC`) to reach "
            "one, or --fan-out to accept that)\n"
        )
    assert not Path(f"{export}.replay-state").exists()
    assert topic.counts("t/Subscriptions/audit").active == 0
    r = cli("replay", str(export), "--to", "t", "--fan-out")
    assert r.exit_code == 0, r.stderr
    assert topic.counts("t/Subscriptions/audit").active == 2
    assert topic.counts("t/Subscriptions/billing").active == 2


def _lease(engine: Engine, sub: str, until: str, kind: str = "run") -> str:
    """A lease rule as a targeted run on another machine writes it (issue 34)."""
    from datetime import datetime

    from sbdlq.operations.lease import lease_rule

    rule = lease_rule("0123456789abcdef", kind, "ops-box pid 42", datetime.fromisoformat(until))
    engine.add_rule(f"t/Subscriptions/{sub}", Rule(rule.name, sql=rule.sql))
    return rule.name


def test_disable_targeted_refuses_while_a_run_holds_its_lease(topic: Engine, cli: Cli) -> None:
    """A live lease: refused with one line and exit 1 (dry run too), nothing changed; status shows
    it; --force takes it over, in the plan, then disables."""
    assert cli("routing", "enable-targeted", "t", "--yes").exit_code == 0
    name = _lease(topic, "billing", "2999-01-01T00:00:00+00:00")
    rules = _rules(topic)
    refusal = (
        "sbdlq: targeted routing on topic t is in use by a targeted run (ops-box pid 42) on subscription billing, "
        "until 2999-01-01T00:00:00Z: disabling it now would let that run's copies reach every subscription "
        "(wait for the run to end, or add --force if its holder died (a run still alive then stops before its "
        "next chunk and reports what may have strayed))\n"
    )
    for dry in ([], ["--dry-run"]):
        r = cli("routing", "disable-targeted", "t", "--yes", *dry)
        assert (r.exit_code, r.stdout, r.stderr) == (1, "", refusal)
    assert _rules(topic) == rules
    r = cli("routing", "status", "t")
    assert r.exit_code == 0
    assert r.stdout.splitlines()[0] == "topic t: targeted routing enabled"  # the lease is no rule of the routing
    assert r.stdout.splitlines()[-1] == (
        "lease: a targeted run (ops-box pid 42) on subscription billing, until 2999-01-01T00:00:00Z (live)"
    )
    doc = cli("routing", "status", "t", "-o", "json").json()
    assert doc["leases"] == [
        {
            "subscription": "billing",
            "kind": "run",
            "holder": "ops-box pid 42",
            "until": "2999-01-01T00:00:00Z",
            "live": True,
        }
    ]
    assert [s["rules"] for s in doc["subscriptions"]] == [1, 1]
    r = cli("routing", "disable-targeted", "t", "--yes", "--force")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[:2] == [
        "plan: 4 rule change(s) on topic t:",
        f"  billing: rule {name}: delete (the lease of a targeted run (ops-box pid 42) on subscription billing, "
        "until 2999-01-01T00:00:00Z, taken over: --force)",
    ]
    assert [r.name for r in topic.rules("t/Subscriptions/billing")] == ["big"]
    assert [r.name for r in topic.rules("t/Subscriptions/audit")] == ["$Default"]


def test_an_expired_lease_is_removed_by_the_disable(topic: Engine, cli: Cli) -> None:
    """A holder that died long ago: its lease is past its end (and the clock skew allowed)."""
    assert cli("routing", "enable-targeted", "t", "--yes").exit_code == 0
    name = _lease(topic, "audit", "2000-01-01T00:00:00+00:00")
    r = cli("routing", "disable-targeted", "t", "--yes")
    assert r.exit_code == 0, r.stderr
    assert f"  audit: rule {name}: delete (the lease of a targeted run (ops-box pid 42) on subscription audit, " in (
        r.stdout
    )
    assert [r.name for r in topic.rules("t/Subscriptions/audit")] == ["$Default"]
    # Already disabled, with only a stale lease left: the disable removes it and changes nothing else.
    _lease(topic, "audit", "2000-01-01T00:00:00+00:00")
    r = cli("routing", "disable-targeted", "t", "--yes")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0] == "plan: 0 rule change(s) on topic t:"
    assert [r.name for r in topic.rules("t/Subscriptions/audit")] == ["$Default"]


def test_a_targeted_run_refuses_while_a_disable_holds_its_lease(topic: Engine, cli: Cli) -> None:
    _dead_letter_billing(topic, 2)
    assert cli("routing", "enable-targeted", "t", "--yes").exit_code == 0
    _lease(topic, "audit", "2999-01-01T00:00:00+00:00", kind="disable")
    r = cli("resubmit", "t/Subscriptions/billing", "--only-this-subscription")
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == (
        "sbdlq: targeted routing on topic t is being disabled by a disable-targeted (ops-box pid 42) on "
        "subscription audit, until 2999-01-01T00:00:00Z (nothing was sent; enable it again once that is done, "
        "then run again)\n"
    )
    assert topic.counts("t/Subscriptions/billing").dead_letter == 2
    assert [r.name for r in topic.rules("t/Subscriptions/billing")] == ["big", "sbdlq-target"]  # its lease given back


def test_disable_targeted_waits_for_a_lease_to_end(topic: Engine, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """--wait: the leases read again until none is live (here one ends a second from now), then the
    disable goes on; one still live when the wait is over is refused as without --wait."""
    from datetime import timedelta

    from sbdlq.operations import targeted
    from sbdlq.operations.lease import SKEW_S, now_utc

    monkeypatch.setattr(targeted, "WAIT_POLL_S", 0.1)
    assert cli("routing", "enable-targeted", "t", "--yes").exit_code == 0
    far = _lease(topic, "billing", "2999-01-01T00:00:00+00:00")
    r = cli("routing", "disable-targeted", "t", "--yes", "--wait", "300ms")
    assert (r.exit_code, r.stdout) == (1, "")
    waiting, refusal = r.stderr.splitlines()
    assert waiting == (
        "waiting up to 0.3s for a targeted run (ops-box pid 42) on subscription billing, until 2999-01-01T00:00:00Z "
        "to end"
    )
    assert refusal.startswith("sbdlq: targeted routing on topic t is in use by a targeted run (ops-box pid 42)")
    assert "(waited 0.3s) (wait for the run to end" in refusal
    topic.remove_rule("t/Subscriptions/billing", far)
    ending = (now_utc() - timedelta(seconds=SKEW_S - 1)).isoformat()  # live for one more second
    _lease(topic, "billing", ending)
    r = cli("routing", "disable-targeted", "t", "--yes", "--wait", "1m")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "targeted routing disabled on topic t: 4 rule change(s)"
    assert [r.name for r in topic.rules("t/Subscriptions/billing")] == ["big"]  # its expired lease removed too
    r = cli("routing", "disable-targeted", "t", "--force", "--wait", "1m")
    assert (r.exit_code, r.stderr) == (2, "sbdlq: --wait and --force contradict each other: choose one\n")


def test_a_targeted_run_that_moves_nothing_gives_its_lease_back(engine: Engine, cli: Cli) -> None:
    """Nothing selected (the run ends before its loop), or refused after its lease was written (a
    topic with duplicate detection, copies keeping their ids): no lease is left behind."""
    engine.create_topic("d", requires_duplicate_detection=True)
    for sub in ("billing", "audit"):
        engine.create_subscription("d", sub)
    assert cli("routing", "enable-targeted", "d", "--yes").exit_code == 0
    r = cli("resubmit", "d/Subscriptions/billing", "--only-this-subscription", "--new-message-id")
    assert r.exit_code == 0, r.stderr  # an empty DLQ
    billing = Address(EntityPath("d", "billing"))
    engine.send("d", [OutboundMessage(body=b"x", message_id="m0")])
    engine.dead_letter(billing, [m.lock_token or "" for m in engine.receive(billing, 1)], "Bad", "broken")
    r = cli("resubmit", "d/Subscriptions/billing", "--only-this-subscription")
    assert r.exit_code == 2 and "duplicate detection" in r.stderr
    left = [rule.name for s in ("billing", "audit") for rule in engine.rules(f"d/Subscriptions/{s}")]
    assert not [name for name in left if name.startswith("sbdlq-lease-")], left
    assert cli("routing", "disable-targeted", "d", "--yes").exit_code == 0
