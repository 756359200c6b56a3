"""Resubmit never sends a copy into a topic that would route it nowhere (issue 12, item 1).

A topic accepts every message and silently drops the ones no subscription's rules take: a
resubmit that completed the original after such a send lost the message with exit 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sbdlq.addresses import parse_address
from sbdlq.cli.main import app
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.models import OutboundMessage

SUB_DLQ = parse_address("t/Subscriptions/s/$DeadLetterQueue")


def _dead_letter_all(eng: Engine, address: str, n: int) -> None:
    got = eng.receive(parse_address(address), n)
    eng.dead_letter(parse_address(address), [m.lock_token or "" for m in got], "Bad", "broken")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "store.db"
    monkeypatch.setenv("SBDLQ_EMULATOR", str(path))
    monkeypatch.setenv("SBDLQ_CONFIG", str(tmp_path / "none.yaml"))
    return path


@pytest.fixture
def routed(env: Path) -> Path:
    """The issue's scenario: filter `status = 'new'`, action `SET status = 'routed'`, 2 in the DLQ."""
    with Engine(env) as eng:
        eng.create_topic("t")
        eng.create_subscription("t", "s", rules=[Rule("new", sql="status = 'new'", action="SET status = 'routed'")])
        eng.send("t", [OutboundMessage(body=b"x", application_properties={"status": "new"}) for _ in range(2)])
        _dead_letter_all(eng, "t/Subscriptions/s", 2)
        assert [m.application_properties["status"] for m in eng.peek(SUB_DLQ, 0, 10)] == ["routed"] * 2
    return env


def test_resubmit_of_a_subscription_whose_rule_action_changed_the_copy_is_refused(routed: Path) -> None:
    r = CliRunner().invoke(app, ["resubmit", "t/Subscriptions/s"])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "sbdlq: the copy of sequence number 1 would not reach subscription s: topic t would not deliver it back "
        "to t/Subscriptions/s (its rules: status = 'new'; the property was changed by the rule's action "
        "(SET status = 'routed') when the message was first delivered, so its copy no longer matches; select "
        "other messages, or resubmit them --to a queue)"
    ]
    with Engine(routed) as eng:
        counts = eng.counts("t/Subscriptions/s")
        assert (counts.active, counts.dead_letter) == (0, 2)


def test_the_refusal_also_holds_for_a_dry_run(routed: Path) -> None:
    r = CliRunner().invoke(app, ["resubmit", "t/Subscriptions/s", "--dry-run"])
    assert r.exit_code == 2
    assert "would not reach subscription s" in r.stderr


def test_resubmit_to_a_topic_without_subscriptions_keeps_every_original(env: Path) -> None:
    with Engine(env) as eng:
        eng.create_queue("q")
        eng.create_topic("T")
        eng.send("q", [OutboundMessage(body=b"x") for _ in range(3)])
        _dead_letter_all(eng, "q", 3)
    r = CliRunner().invoke(app, ["resubmit", "q", "--to", "T", "-o", "json"])
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert {k: doc[k] for k in ("selected", "resubmitted", "failed", "skipped", "unroutable")} == {
        "selected": 3,
        "resubmitted": 0,
        "failed": 0,
        "skipped": 0,
        "unroutable": 3,
    }
    assert r.stderr.splitlines() == [
        "sbdlq: plan: resubmit 3 message(s) from q/$DeadLetterQueue to topic T",
        "sbdlq: warning: topic T has no subscription: the broker would drop every copy",
        "sbdlq: 3 message(s) were not resubmitted because no subscription of the target would receive their "
        "copy; they remain in the queue (check the topic's subscription rules)",
    ]
    with Engine(env) as eng:
        assert eng.counts("q").dead_letter == 3


def test_only_the_copies_some_rule_takes_are_sent(env: Path) -> None:
    with Engine(env) as eng:
        eng.create_queue("q")
        eng.create_topic("T")
        eng.create_subscription("T", "eu", rules=[Rule("eu", sql="region = 'eu'")])
        eng.create_subscription("T", "us", rules=[Rule("us", correlation={"properties": {"region": "us"}})])
        regions = ["eu", "us", "apac", "eu"]
        eng.send("q", [OutboundMessage(body=b"x", application_properties={"region": g}) for g in regions])
        _dead_letter_all(eng, "q", 4)
    r = CliRunner().invoke(app, ["resubmit", "q", "--to", "T"])
    assert r.exit_code == 1
    assert r.stdout.startswith("resubmitted 3 of 4 selected message(s) in ")
    assert r.stdout.rstrip().endswith("s (1 unroutable)")
    with Engine(env) as eng:
        assert eng.counts("T/Subscriptions/eu").active == 2
        assert eng.counts("T/Subscriptions/us").active == 1
        (left,) = eng.peek(parse_address("q/$DeadLetterQueue"), 0, 10)
        assert left.application_properties["region"] == "apac"
        # Released at the end of the run: another receiver can take it at once.
        assert len(eng.receive(parse_address("q/$DeadLetterQueue"), 10)) == 1


def test_a_topic_whose_subscriptions_take_everything_is_not_held_back(env: Path) -> None:
    with Engine(env) as eng:
        eng.create_queue("q")
        eng.create_topic("T")
        eng.create_subscription("T", "all")
        eng.send("q", [OutboundMessage(body=b"x") for _ in range(2)])
        _dead_letter_all(eng, "q", 2)
    r = CliRunner().invoke(app, ["resubmit", "q", "--to", "T", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["unroutable"] == 0
    with Engine(env) as eng:
        assert eng.counts("T/Subscriptions/all").active == 2


def test_rules_that_cannot_be_read_require_allow_unverified_routing(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sbdlq.backends.emulator import EmulatorBackend
    from sbdlq.errors import AuthError

    async def refused(self: EmulatorBackend, topic: object) -> None:
        raise AuthError("Unauthorized: Manage claim required")

    monkeypatch.setattr(EmulatorBackend, "subscription_rules", refused)
    with Engine(env) as eng:
        eng.create_queue("q")
        eng.create_topic("T")
        eng.create_subscription("T", "all")
        eng.send("q", [OutboundMessage(body=b"x")])
        _dead_letter_all(eng, "q", 1)
    r = CliRunner().invoke(app, ["resubmit", "q", "--to", "T"])
    assert r.exit_code == 5
    assert r.stderr.splitlines() == [
        "sbdlq: cannot read the rules of topic T's subscriptions (Unauthorized: Manage claim required): copies no "
        "subscription takes would be dropped by the broker (use a key with Manage rights, or rerun with "
        "--allow-unverified-routing: copies then go unchecked to every subscription whose rules take them, as with "
        "--fan-out)"
    ]
    r = CliRunner().invoke(app, ["resubmit", "q", "--to", "T", "--allow-unverified-routing"])
    assert r.exit_code == 0, r.stderr
    assert "sbdlq: warning: routing not verified: cannot read the rules of topic T's subscriptions" in r.stderr
    with Engine(env) as eng:
        assert eng.counts("T/Subscriptions/all").active == 1
