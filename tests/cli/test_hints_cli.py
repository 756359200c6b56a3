"""Mistakes that look like success: a selection that takes nothing, a bare name in --where, a misspelt
entity, an apply glob that matches nothing. One line on stderr each; exit statuses unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import Seeder as Store

from sbdlq.fingerprint import fingerprint
from sbdlq.nearest import entity_hint

DECLINED = fingerprint("PaymentDeclined", "card declined")


@pytest.fixture
def orders(seed: Store) -> Store:
    """orders: 3 PaymentDeclined (subject charge, tenant eu), 2 Timeout; billing: empty."""
    seed.queue("orders")
    seed.queue("billing")
    seed.dead_letter(
        "orders",
        3,
        "PaymentDeclined",
        "card declined",
        prefix="p",
        subject="charge",
        application_properties={"tenant": "eu"},
    )
    seed.dead_letter("orders", 2, "Timeout", "took 30s", prefix="t", subject="charge")
    return seed


def test_a_misspelt_reason_that_purges_nothing_says_what_exists(orders: Store, sbdlq: Any) -> None:
    before = orders.snapshot("orders")
    r = sbdlq("-o", "none", "purge", "orders", "--reason", "PaymentDecline", "--yes")
    assert (r.exit_code, r.stdout) == (0, "")  # a legitimate "nothing to do" for scripts: still 0
    # (the plan line is a note: shown here as on a terminal, not under cron)
    assert [line for line in r.stderr.splitlines() if not line.startswith("sbdlq: plan:")] == [
        "sbdlq: warning: no message matched the selection (5 read); "
        "--reason 'PaymentDecline': nearest PaymentDeclined (3)"
    ]
    assert orders.snapshot("orders") == before


def test_resubmit_and_peek_name_the_fingerprints_and_subjects_that_exist(orders: Store, sbdlq: Any) -> None:
    typo = ("0" if DECLINED.id[0] != "0" else "1") + DECLINED.id[1:]
    r = sbdlq("resubmit", "orders", "--fingerprint", typo, "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["resubmitted"]) == (0, 0)
    hint = r.stderr.splitlines()[-1]
    assert hint.startswith("sbdlq: warning: no message matched the selection (5 read); --fingerprint")
    assert f"{DECLINED.id} (3)" in hint
    r = sbdlq("peek", "orders", "--subject", "charges")
    assert r.exit_code == 0
    assert r.stderr.splitlines() == [
        "sbdlq: warning: no message matched the selection (5 read); --subject 'charges': nearest charge (5)"
    ]
    r = sbdlq("inspect-reason", "orders", "--reason", "timeot", "-o", "json")
    assert (r.exit_code, r.stdout) == (0, "[]\n")
    assert "--reason 'timeot': nearest Timeout (2)" in r.stderr


def test_a_bare_name_in_where_is_named(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("peek", "orders", "--where", "tenant = eu", "-o", "json")
    assert (r.exit_code, r.stdout) == (0, "[]\n")
    assert r.stderr == (
        "sbdlq: warning: no message matched the selection (5 read); --where names eu, which is no property "
        "of any message read: quote a text value ('eu')\n"
    )
    quoted = sbdlq("peek", "orders", "--where", "tenant = 'eu'", "-o", "json")
    assert (quoted.exit_code, len(json.loads(quoted.stdout)), quoted.stderr) == (0, 3, "")


def test_no_hint_when_something_matched_or_the_dlq_is_empty(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("peek", "orders", "--reason", "Timeout", "-o", "json")
    assert (r.exit_code, r.stderr) == (0, "")
    for args in (["purge", "billing", "--reason", "Nope", "--yes"], ["peek", "billing", "--reason", "Nope"]):
        r = sbdlq(*args)
        assert (r.exit_code, "warning" in r.stderr) == (0, False), args
    # a selection with nothing to compare (a body text) has nothing near to name
    r = sbdlq("peek", "orders", "--body-contains", "zzz", "-o", "json")
    assert (r.exit_code, r.stderr) == (0, "")


def test_a_misspelt_entity_gets_the_closest_names(orders: Store, sbdlq: Any) -> None:
    r = sbdlq("peek", "ordres")
    assert (r.exit_code, r.stdout) == (4, "")
    assert r.stderr == "sbdlq: The messaging entity 'ordres' could not be found. (did you mean orders?)\n"
    r = sbdlq("purge", "zzzzzz", "--yes")
    assert (r.exit_code, "did you mean" in r.stderr) == (4, False)


def test_the_entity_hint_reads_both_backends_messages() -> None:
    paths = ["orders", "t", "t/Subscriptions/billing", "t/Subscriptions/audit"]
    assert entity_hint("The messaging entity 'ordres' could not be found.", paths) == "did you mean orders?"
    # the Service Bus backend's words: `<what> not found in <host>`
    sb = "subscription t/Subscriptions/biling/$DeadLetterQueue not found in ns.servicebus.windows.net"
    assert entity_hint(sb, paths) == "did you mean t/Subscriptions/billing?"
    assert entity_hint("queue 'nothing-alike' not found in ns", paths) is None


def test_an_apply_glob_matching_nothing_is_a_warning_in_the_plan_and_the_json(
    orders: Store, sbdlq: Any, tmp_path: Any
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - name: retry\n    entities: [orders, billng/Subscriptions/*]\n    reason: Timeout\n"
        "    resubmit: {}\n"
    )
    r = sbdlq("apply", str(policy), "--yes", "-o", "json")
    assert r.exit_code == 0
    assert r.stderr.splitlines()[0] == (
        "sbdlq: warning: rule 'retry': billng/Subscriptions/* matches no queue or subscription"
    )
    steps = json.loads(r.stdout)
    assert [(s["entity"], s["status"], s["warning"]) for s in steps] == [
        ("billng/Subscriptions/*", "unmatched", "billng/Subscriptions/* matches no queue or subscription"),
        ("orders", "ok", None),
    ]
    quiet = sbdlq("apply", str(policy), "--yes", "-o", "none")
    assert (quiet.exit_code, quiet.stdout) == (0, "")
    assert "billng/Subscriptions/* matches no queue or subscription" in quiet.stderr


def test_an_apply_rule_on_a_misspelt_name_fails_naming_the_nearest(orders: Store, sbdlq: Any, tmp_path: Any) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - name: retry\n    entities: [ordres]\n    reason: Timeout\n    resubmit: {}\n")
    r = sbdlq("apply", str(policy), "--yes", "-o", "json")
    assert r.exit_code == 1
    (step,) = json.loads(r.stdout)
    assert (step["status"], step["error"].endswith("(did you mean orders?)")) == ("failed", True)
