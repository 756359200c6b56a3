"""`sbdlq apply`: bad files refused with LINE:COLUMN and exit 2, the plan, --dry-run, --yes, --explain,
-o json / prometheus / none, the lock, and the exit statuses 0, 1, 2, 3."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from policy_cases import BAD_POLICIES, Bad, write_bad
from support import Cli, Seeder

from sbdlq.models import ATTEMPT

GOOD = """\
rules:
  - name: retry timeouts
    entities: [orders]
    reason: Timeout
    resubmit: {max_attempts: 2, then: keep}
  - name: drop poison
    entities: ["*"]
    reason: Poison
    purge: {export: EXPORTS}
  - name: page on payments
    entities: [payments]
    alert: {above: 2}
"""


@pytest.fixture
def ns(seed: Seeder) -> Seeder:
    """orders: 3 Timeout, 2 Poison; payments: 3 Declined."""
    seed.queue("orders")
    seed.queue("payments")
    seed.dead_letter("orders", 3, reason="Timeout", prefix="t")
    seed.dead_letter("orders", 2, reason="Poison", prefix="p")
    seed.dead_letter("payments", 3, reason="Declined", prefix="d")
    return seed


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD.replace("EXPORTS", str(tmp_path / "exports")))
    return path


def state(seed: Seeder) -> tuple[list[str | None], list[str | None], list[str | None]]:
    return sorted(seed.dlq_ids("orders")), sorted(seed.dlq_ids("payments")), seed.peek_ids("orders")


@pytest.mark.parametrize("case", BAD_POLICIES, ids=[c.id for c in BAD_POLICIES])
def test_a_bad_policy_is_one_line_exit_2_and_nothing_runs(cli: Cli, ns: Seeder, tmp_path: Path, case: Bad) -> None:
    before = state(ns)
    path = write_bad(tmp_path, case)
    code, out, err = cli("apply", str(path), "--yes")
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"sbdlq: {path}:{case.at}: ") and case.says in err, err
    assert state(ns) == before


def test_explain_says_each_rule_in_words_and_reads_no_broker(cli: Cli, policy: Path, tmp_path: Path) -> None:
    code, out, err = cli("--emulator", str(tmp_path / "none.db"), "apply", "--explain", str(policy))
    assert (code, err) == (0, "")
    exports = tmp_path / "exports"
    assert out == (
        "Rule 1, 'retry timeouts' (line 2):\n"
        "  on the dead-letter queue of orders,\n"
        "  take the messages whose dead-letter reason is 'Timeout',\n"
        "  send a copy of each to its queue (a subscription: its topic), then remove it from the DLQ.\n"
        "  A message resubmitted 2 time(s) already (sbdlq-attempt 2) is not sent again:\n"
        "    it stays in the DLQ, counted as kept.\n"
        "\n"
        "Rule 2, 'drop poison' (line 6):\n"
        "  on the dead-letter queue of every queue and subscription,\n"
        "  take the messages whose dead-letter reason is 'Poison',\n"
        f"  export each to a new file in {exports}, then delete it.\n"
        "\n"
        "Rule 3, 'page on payments' (line 10):\n"
        "  on the dead-letter queue of payments,\n"
        "  take every message,\n"
        "  count them, and make the run exit 3 when there are more than 2. Nothing moves.\n"
    )
    assert not (tmp_path / "none.db").exists()


def test_dry_run_prints_the_plan_and_changes_nothing(cli: Cli, ns: Seeder, policy: Path) -> None:
    before = state(ns)
    code, out, err = cli("apply", str(policy), "--dry-run")
    assert code == 3  # the alert would fire now: payments holds 3, above 2
    rows = [re.split(r"\s*│\s*", line.strip("│ ")) for line in out.splitlines() if line.startswith("│")]
    assert rows == [
        [
            "retry timeouts",
            "orders",
            "resubmit",
            "3",
            "dry_run",
            "resubmit 3 to orders; 0 at max_attempts 2: keep in the DLQ",
        ],
        ["drop poison", "orders", "purge", "2", "dry_run", f"export to {policy.parent / 'exports'} and delete 2"],
        ["drop poison", "payments", "purge", "0", "dry_run", f"export to {policy.parent / 'exports'} and delete 0"],
        ["page on payments", "payments", "alert", "3", "fired", "alert if more than 2 (now 3: fires)"],
    ]
    assert "sbdlq: plan: rule 'retry timeouts' on orders: resubmit 3 to orders" in err
    assert state(ns) == before
    assert not (policy.parent / "exports").exists()


def test_rules_that_delete_need_yes_off_a_terminal(cli: Cli, ns: Seeder, policy: Path) -> None:
    before = state(ns)
    code, out, err = cli("apply", str(policy))
    assert (code, out) == (2, "")
    assert err == (
        f"sbdlq: {policy} has rules that delete ('drop poison'): apply needs --yes when stdin is not a terminal\n"
    )
    assert state(ns) == before


def test_a_run_reports_each_rule_and_entity_in_json_and_exits_3_when_an_alert_fires(
    cli: Cli, ns: Seeder, policy: Path
) -> None:
    code, out, err = cli("apply", str(policy), "--yes", "-o", "json")
    assert code == 3
    assert err.splitlines()[-1] == "sbdlq: alert 'page on payments': payments holds 3 matching message(s), above 2"
    steps = json.loads(out)
    assert [(s["rule"], s["entity"], s["action"], s["status"], s["matched"]) for s in steps] == [
        ("retry timeouts", "orders", "resubmit", "ok", 3),
        ("drop poison", "orders", "purge", "ok", 2),
        ("drop poison", "payments", "purge", "ok", 0),
        ("page on payments", "payments", "alert", "fired", 3),
    ]
    retry, drop, _, alert = steps
    assert set(retry) == {
        "rule",
        "entity",
        "action",
        "warning",
        "status",
        "matched",
        "error",
        "result",
        "export",
        "max_attempts",
        "at_max_attempts",
        "then",
    }
    assert retry["result"]["resubmitted"] == 3 and retry["then"] == {"then": "keep", "kept": 0}
    assert set(retry["result"]) >= {"selected", "resubmitted", "failed", "not_matching", "unroutable", "dry_run"}
    assert (drop["result"]["purged"], drop["result"]["exported"]) == (2, 2)
    (export,) = drop["export"]
    assert [json.loads(line)["message_id"] for line in Path(export).read_text().splitlines()] == ["p0", "p1"]
    assert alert["result"] == {"dead_letter": 3, "above": 2}
    assert sorted(ns.dlq_ids("orders")) == []
    assert {m.message_id: m.application_properties[ATTEMPT] for m in ns.active("orders")} == {
        "t0": 1,
        "t1": 1,
        "t2": 1,
    }


def test_a_failing_rule_exits_1_and_the_next_rules_still_run(cli: Cli, ns: Seeder, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "rules:\n"
        "  - {name: missing, entities: [nowhere], purge: {}}\n"
        "  - {name: retry, entities: [orders], reason: Timeout, resubmit: {}}\n"
    )
    code, out, err = cli("apply", str(path), "--yes", "-o", "jsonl")
    assert code == 1
    first, second = (json.loads(line) for line in out.splitlines())
    assert (first["status"], second["status"]) == ("failed", "ok")
    assert "nowhere" in first["error"]
    assert err.splitlines()[-1] == "sbdlq: 1 of 2 rule step(s) failed; the messages they left stay in their DLQ"
    assert ns.dlq_ids("orders") == ["p0", "p1"]


def test_stop_on_error_stops_after_the_failing_rule(cli: Cli, ns: Seeder, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "stop_on_error: true\n"
        "rules:\n"
        "  - {name: missing, entities: [nowhere], purge: {}}\n"
        "  - {name: retry, entities: [orders], reason: Timeout, resubmit: {}}\n"
    )
    code, out, _ = cli("apply", str(path), "--yes", "-o", "json")
    assert code == 1
    assert [s["status"] for s in json.loads(out)] == ["failed", "skipped"]
    assert len(ns.dlq_ids("orders")) == 5


def test_output_none_is_quiet_and_prometheus_is_for_the_textfile_collector(
    cli: Cli, ns: Seeder, policy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sbdlq.terminal.stderr_is_terminal", lambda: False)  # as under cron
    code, out, err = cli("apply", str(policy), "--yes", "-o", "none")
    assert (code, out) == (3, "")
    assert err == "sbdlq: alert 'page on payments': payments holds 3 matching message(s), above 2\n"
    code, out, _ = cli("apply", str(policy), "--yes", "-o", "prometheus")
    assert code == 3
    lines = out.splitlines()
    assert out.endswith("\n")
    pol = f'policy="{policy}"'
    assert (
        f'sbdlq_apply_messages{{{pol},rule="retry timeouts",entity="orders",action="resubmit",outcome="matched"}} 0'
        in lines
    )
    assert f'sbdlq_apply_alert_fired{{{pol},rule="page on payments",entity="payments"}} 1' in lines
    # The resubmit's own outcomes (max_attempts, then: keep); only the alert has a fired series.
    retry = f'{pol},rule="retry timeouts",entity="orders",action="resubmit"'
    assert f'sbdlq_apply_messages{{{retry},outcome="at_max_attempts"}} 0' in lines
    assert f'sbdlq_apply_messages{{{retry},outcome="kept"}} 0' in lines
    assert [line for line in lines if line.startswith("sbdlq_apply_alert_fired")] == [
        f'sbdlq_apply_alert_fired{{{pol},rule="page on payments",entity="payments"}} 1'
    ]
    assert f'sbdlq_apply_failed{{{pol},rule="drop poison",entity="orders"}} 0' in lines
    assert f"sbdlq_apply_exit_status{{{pol}}} 3" in lines
    assert [line for line in lines if line.startswith("# TYPE")] == [
        "# TYPE sbdlq_apply_messages gauge",
        "# TYPE sbdlq_apply_failed gauge",
        "# TYPE sbdlq_apply_alert_fired gauge",
        "# TYPE sbdlq_apply_last_run_timestamp_seconds gauge",
        "# TYPE sbdlq_apply_exit_status gauge",
    ]


def test_a_second_run_of_the_same_policy_exits_1_at_once(
    cli: Cli, ns: Seeder, policy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sbdlq.policy.lock import policy_lock

    state_home = cli.env["XDG_STATE_HOME"]
    assert state_home is not None
    monkeypatch.setenv("XDG_STATE_HOME", state_home)
    before = state(ns)
    with policy_lock(str(policy)):
        code, out, err = cli("apply", str(policy), "--yes")
    assert (code, out) == (1, "")
    assert re.fullmatch(
        rf"sbdlq: another sbdlq apply of {re.escape(str(policy))} is running \(pid \d+\); this run did nothing "
        r"\(it runs the rules; let it finish\)\n",
        err,
    ), err
    assert state(ns) == before
    # Released with its holder: the next run goes ahead.
    assert cli("apply", str(policy), "--yes", "-o", "none").exit_code == 3


def test_apply_rejects_an_output_it_does_not_write(cli: Cli, policy: Path) -> None:
    code, out, err = cli("apply", str(policy), "--dry-run", "-o", "tsv")
    assert (code, out) == (2, "")
    assert err == "sbdlq: invalid output format 'tsv' for apply (use table, json, jsonl, yaml, none, prometheus)\n"


def test_only_this_subscription_needs_targeted_routing_then_reaches_that_subscription_alone(
    cli: Cli, seed: Seeder, tmp_path: Path
) -> None:
    seed.topic("t", "a", "b")
    seed.dead_letter("t/Subscriptions/a", 2, prefix="x")
    assert len(seed.active("t/Subscriptions/b")) == 2  # b took its own copies when they were sent
    path = tmp_path / "p.yaml"
    path.write_text(
        "rules:\n  - {name: back to a, entities: [t/Subscriptions/a], resubmit: {only_this_subscription: true}}\n"
    )
    code, out, err = cli("apply", str(path), "-o", "jsonl")
    assert code == 1
    assert "sbdlq routing enable-targeted t" in json.loads(out)["error"]
    assert seed.dlq_ids("t/Subscriptions/a") == ["x0", "x1"]

    assert cli("routing", "enable-targeted", "t", "--yes")[0] == 0
    code, out, err = cli("apply", str(path), "-o", "jsonl")
    assert code == 0, err
    assert json.loads(out)["result"]["resubmitted"] == 2
    assert seed.dlq_ids("t/Subscriptions/a") == []
    assert sorted(m.message_id or "" for m in seed.active("t/Subscriptions/a")) == ["x0", "x1"]
    assert len(seed.active("t/Subscriptions/b")) == 2  # no copy reached b


def test_a_symlink_to_a_running_policy_is_the_same_policy(
    cli: Cli, ns: Seeder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34 item 6: the lock and a relative `export:` folder go by the file's real path, not the link's."""
    from sbdlq.policy.lock import policy_lock

    real_dir, link_dir = tmp_path / "policies", tmp_path / "cron"
    real_dir.mkdir()
    link_dir.mkdir()
    real = real_dir / "policy.yaml"
    real.write_text(GOOD.replace("EXPORTS", "exports"))
    link = link_dir / "orders.yaml"
    link.symlink_to(real)
    state_home = cli.env["XDG_STATE_HOME"]
    assert state_home is not None
    monkeypatch.setenv("XDG_STATE_HOME", state_home)
    before = state(ns)
    with policy_lock(str(real)):
        code, out, err = cli("apply", str(link), "--yes")
    assert (code, out) == (1, "")
    assert f"another sbdlq apply of {link} is running" in err
    assert state(ns) == before
    code, out, _ = cli("apply", str(link), "--yes", "-o", "json")
    assert code == 3
    (drop,) = [s for s in json.loads(out) if s["rule"] == "drop poison" and s["entity"] == "orders"]
    (export,) = drop["export"]
    assert Path(export).parent == real_dir / "exports"
    assert not (link_dir / "exports").exists()
    assert [json.loads(line)["message_id"] for line in Path(export).read_text().splitlines()] == ["p0", "p1"]


def test_a_purge_step_whose_matches_another_receiver_holds_makes_no_file(
    cli: Cli, ns: Seeder, policy: Path, tmp_path: Path
) -> None:
    """Issue 34 item 7: the plan found 2 to delete, the purge received none of them: no export file."""
    from sbdlq.addresses import parse_address

    held = ns.engine.receive(parse_address("orders/$DeadLetterQueue"), 10)  # another receiver's locks
    assert len(held) == 5
    code, out, _ = cli("apply", str(policy), "--yes", "-o", "json")
    (drop,) = [s for s in json.loads(out) if s["rule"] == "drop poison" and s["entity"] == "orders"]
    assert (drop["matched"], drop["result"]["purged"], drop["result"]["not_received"]) == (2, 0, 2)
    assert drop["export"] == []
    exports = tmp_path / "exports"
    assert not exports.exists() or list(exports.iterdir()) == []
    assert code == 3  # the alert on payments still fires; nothing failed
