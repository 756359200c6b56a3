"""README.md's tour and recipes run, and the docs pages' examples that the demo can run: each
bash block, line by line, against a fresh emulator.

test_docs.py checks that every `sbdlq ...` line parses; here they run (support.readme): the
five-minute tour as written, every recipe as pasted on `sbdlq emulator demo`'s namespace, the
sample Config.json of docs/emulator.md and the targeted routing of docs/routing.md,
with a profile `prod` naming the demo's store. Crontab lines run as cron runs them (PATH
/usr/bin:/bin, /bin/sh in HOME, sbdlq where pipx puts it); their `NAME=/var/...` directories
point into the test's folder, and `mail` and `page-oncall` are stand-ins that log their
arguments; a `count --watch` line is interrupted (Ctrl-C) once its first snapshot is out. The
one recipe that needs a real proxy is skipped with the reason in the skip message.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from support.readme import FAILED, USER_CONFIG, Block, Run, bash_blocks, run_block, run_lines, section

TOUR = bash_blocks(section("## A five-minute tour"))
RECIPES = {block.label: block for block in bash_blocks(section("## Recipes"))}

#: Recipes that can't run here, and why.
NEEDS_MORE = {
    "Behind a proxy": "a namespace behind an HTTP proxy (AMQP over WebSockets on 443)",
}


def demo_counts(tmp: Path) -> dict[str, Any]:
    """orders' counts and DLQ reasons on a fresh demo (the demo is the same on every run)."""
    run = ok(
        run_lines(
            [
                "sbdlq emulator demo >/dev/null",
                "sbdlq count orders -o json",
                "echo ---",
                "sbdlq inspect-reason orders -o json",
            ],
            tmp,
        )
    )
    counts, reasons = run.stdout.split("---\n")
    (row,) = json.loads(counts)
    return {**row, "reasons": {r["key"]: r["count"] for r in json.loads(reasons)}}


def ok(run: Run) -> Run:
    """The run, after asserting every line exited 0."""
    assert run.returncode == 0, f"{run.stderr.strip()}\n--- stdout:\n{run.stdout[-2000:]}"
    assert FAILED not in run.stderr
    return run


def take_active(tmp: Path, queue: str) -> list[dict[str, Any]]:
    """The queue's active messages, taken off it (`emulator receive --complete`)."""
    return sbdlq_json(tmp, f"emulator receive {queue} --max 100 --complete")  # type: ignore[no-any-return]


def sbdlq_json(tmp: Path, command: str) -> Any:
    """`sbdlq COMMAND -o json` on tmp's store, parsed."""
    return json.loads(ok(run_lines([f"sbdlq {command} -o json"], tmp)).stdout)


def test_the_tour_has_its_block() -> None:
    assert len(TOUR) == 1 and TOUR[0].lines[0].startswith("sbdlq emulator demo")


def test_the_five_minute_tour_runs(tmp_path: Path) -> None:
    before = demo_counts(tmp_path / "reference")
    (tmp_path / "tour").mkdir()
    tour = tmp_path / "tour"
    run = ok(run_lines(TOUR[0].lines, tour))

    timeouts, invalid = before["reasons"]["DownstreamTimeout"], before["reasons"]["ValidationFailed"]
    assert f"resubmitted {timeouts} of {timeouts} selected" in run.stdout
    assert f"purged {invalid} of {invalid} selected" in run.stdout
    exported = (tour / "validation-failed.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(exported) == invalid
    assert {json.loads(line)["dead_letter_reason"] for line in exported} == {"ValidationFailed"}

    (after,) = sbdlq_json(tour, "count orders")
    assert after["dead_letter"] == before["dead_letter"] - timeouts - invalid
    assert after["active"] == before["active"] + timeouts
    reasons = {r["key"] for r in sbdlq_json(tour, "inspect-reason orders")}
    assert not reasons & {"DownstreamTimeout", "ValidationFailed"}
    expected_exit = 3 if after["dead_letter"] > 100 else 0
    assert run.stdout.rstrip().endswith(f"exit {expected_exit}")


# --------------------------------------------------------------------------- recipes


def demo(tmp: Path) -> None:
    """The demo namespace, and the user's config with a profile `prod` naming its store."""
    config = tmp / "home" / USER_CONFIG
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"profiles:\n  prod:\n    emulator: {tmp / 'emulator.db'}\n", encoding="utf-8")
    ok(run_lines(["sbdlq emulator demo >/dev/null"], tmp))


def dead_letters(tmp: Path) -> int:
    (orders,) = sbdlq_json(tmp, "count orders")
    return int(orders["dead_letter"])


def stand_ins(tmp: Path) -> list[str]:
    log = tmp / "home" / "stand-ins.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def check_alert(tmp: Path, run: Run) -> None:
    assert dead_letters(tmp) > 100
    assert run.stdout == ""  # -o none: cron mails nothing but the alert
    assert "above 100" in run.stderr
    assert stand_ins(tmp) == ["mail -s DLQ over 100 ops@example.com"]


def check_nightly(tmp: Path, run: Run) -> None:
    # The demo is hours old: nothing to purge, so no export file (nothing was deleted).
    assert list((tmp / "BACKUPS").iterdir()) == []
    assert "purged 0 of 0" in run.stdout


def check_ci_step(tmp: Path, run: Run) -> None:
    assert dead_letters(tmp) == 0
    assert len((tmp / "dlq-orders.jsonl").read_text(encoding="utf-8").splitlines()) > 100


def check_report(tmp: Path, run: Run) -> None:
    (report,) = (tmp / "REPORTS").iterdir()
    rows = [line.split("\t") for line in report.read_text(encoding="utf-8").splitlines()]
    assert {"orders", "events/Subscriptions/notifications"} <= {row[0] for row in rows}
    assert "MaxTransferHopCountExceeded" in run.stdout  # the transfer DLQs, as json


def check_gauges(tmp: Path, run: Run) -> None:
    assert [p.name for p in (tmp / "TEXTFILES").iterdir()] == ["sbdlq.prom"]
    gauges = (tmp / "TEXTFILES" / "sbdlq.prom").read_text(encoding="utf-8")
    assert f'sbdlq_messages{{entity="orders",queue="dead_letter"}} {dead_letters(tmp)}' in gauges


def check_watch(tmp: Path, run: Run) -> None:
    assert "orders" in run.stdout  # the first snapshot of the live table, before Ctrl-C
    snapshot = [json.loads(line) for line in (tmp / "dlq-counts.jsonl").read_text(encoding="utf-8").splitlines()]
    assert snapshot[0]["entity"] == "orders" and "time" in snapshot[0]
    assert stand_ins(tmp) == ["page-oncall orders dead-letters"]


def check_misspelt_tenants(tmp: Path, run: Run) -> None:
    assert "3 message(s) would be resubmitted" in run.stdout
    repaired = [m for m in take_active(tmp, "orders") if m["message_id"].startswith("ord-unkn")]
    properties = [m["application_properties"] for m in repaired]
    assert [(p["tenant"], "debug" in p) for p in properties] == [("eu", False)] * 3
    assert sbdlq_json(tmp, "peek orders --all --where \"tenant = 'EU '\"") == []


def check_schema_errors(tmp: Path, run: Run) -> None:
    exported = [json.loads(line) for line in (tmp / "orders.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(exported) == 4 and all(isinstance(json.loads(m["body"])["total"], str) for m in exported)
    replayed = [m for m in take_active(tmp, "orders") if m["message_id"].startswith("ord-sche")]
    assert len(replayed) == 4 and all(isinstance(json.loads(m["body"])["total"], float) for m in replayed)
    invoices = take_active(tmp, "billing")
    assert len(invoices) == 2 and {m["subject"] for m in invoices} == {"order.invoiced"}
    assert sbdlq_json(tmp, "peek orders --all --reason SchemaError") == []


class Recipe(NamedTuple):
    check: Callable[[Path, Run], None]
    needs: tuple[str, ...] = ()


RUNNABLE = {
    "Cron alert when a DLQ grows": Recipe(check_alert),
    "Nightly": Recipe(check_nightly),
    "A CI step that cleans up after an integration": Recipe(check_ci_step),
    "Nightly namespace report": Recipe(check_report),
    "DLQ gauges for Prometheus": Recipe(check_gauges),
    "Watch the namespace": Recipe(check_watch),
    "Repair a bad property and resubmit": Recipe(check_misspelt_tenants),
    "Export, fix with jq, replay": Recipe(check_schema_errors, needs=("jq",)),
}


def test_every_recipe_is_run_or_skipped_for_a_reason() -> None:
    assert set(RECIPES) == set(RUNNABLE) | set(NEEDS_MORE), "a recipe was added, renamed or removed"
    assert not set(RUNNABLE) & set(NEEDS_MORE)


def recipe_params() -> list[Any]:
    params = []
    for label, block in RECIPES.items():
        marks = [pytest.mark.skip(reason=f"needs {NEEDS_MORE[label]}")] if label in NEEDS_MORE else []
        params.append(pytest.param(label, block, marks=marks, id=label))
    return params


@pytest.mark.parametrize(("label", "block"), recipe_params())
def test_recipe_runs_on_the_demo(label: str, block: Block, tmp_path: Path) -> None:
    recipe = RUNNABLE[label]
    for tool in recipe.needs:
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} on PATH (.ci/run installs it)")
    demo(tmp_path)
    # A crontab's directories (BACKUPS=/var/backups/dlq, ...) are the reader's: here, the test's.
    directories = {name: tmp_path / name for name in ("BACKUPS", "REPORTS", "TEXTFILES")}
    for folder in directories.values():
        folder.mkdir()
    run = run_block(block.lines, tmp_path, directories=directories)
    # The alert's count exits 3 on purpose: its `|| mail` is the recipe.
    assert run.returncode == 0 or label == "Cron alert when a DLQ grows", run.stderr
    assert FAILED not in run.stderr
    recipe.check(tmp_path, run)


def test_the_sample_config_json_declares_what_the_next_lines_use(tmp_path: Path) -> None:
    """docs/emulator.md's sample Config.json loads, and the block after it runs on it as pasted."""
    text = section("# Use the emulator from your app")
    sample = re.search(r"```json\n(.*?)```", text, re.S)
    assert sample is not None
    (tmp_path / "Config.json").write_text(sample.group(1), encoding="utf-8")
    (declare,) = [b for b in bash_blocks(text) if any("init --config Config.json" in line for line in b.lines)]
    ok(run_lines(declare.lines, tmp_path))
    names = {e["entity"] for e in sbdlq_json(tmp_path, "emulator list")}
    assert {"payments", "events/Subscriptions/billing", "orders", "events/Subscriptions/audit"} <= names


def test_crontab_lines_do_not_find_a_bare_sbdlq(tmp_path: Path) -> None:
    """Why the crontab lines give the full path: cron's PATH does not hold the venv's sbdlq."""
    from support.readme import run_cron

    assert run_cron("sbdlq --version", tmp_path, {}).returncode == 127
    assert run_cron("$HOME/.local/bin/sbdlq --version", tmp_path, {}).returncode == 0


# ------------------------------------------------------------------- targeted routing, as pasted

ROUTING = bash_blocks(section("# Resubmit to one subscription: targeted routing"))


def test_the_routing_examples_run_on_the_demo_as_pasted(tmp_path: Path) -> None:
    """Every `sbdlq routing` line of docs/routing.md on `emulator demo`'s checkout topic (issue 38 item 4)."""
    (block,) = ROUTING
    assert all(line.startswith("sbdlq ") for line in block.lines)
    assert sum(" routing " in f" {line}" for line in block.lines) == 4
    demo(tmp_path)
    rules = sbdlq_json(tmp_path, "routing status checkout")
    (billing,) = [c for c in sbdlq_json(tmp_path, "count checkout") if c["entity"].endswith("/billing")]
    assert billing["dead_letter"] == 6

    run = ok(run_lines(block.lines, tmp_path))

    assert "targeted routing disabled" in run.stdout and "targeted routing enabled on topic checkout" in run.stdout
    assert "resubmitted 3 of 3 selected" in run.stdout and "purged 3 of 3 selected" in run.stdout
    assert len((tmp_path / "billing.jsonl").read_text(encoding="utf-8").splitlines()) == 3
    # Billing got each of its orders back once; shipping, which shipped them, got nothing.
    back = take_active(tmp_path, "checkout/Subscriptions/billing")
    assert sorted(m["message_id"] for m in back) == [f"chk-{i:07d}" for i in range(6)]
    assert take_active(tmp_path, "checkout/Subscriptions/shipping") == []
    assert sbdlq_json(tmp_path, "routing status checkout") == rules  # the original rules back
