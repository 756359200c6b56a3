"""README.md's tour and recipes run: each bash block, line by line, against a fresh emulator.

test_docs.py checks that every `sbdlq ...` line parses; here they run (support.readme): the
five-minute tour as written, and every recipe that targets the local emulator, after a seed
that gives it the messages its paragraph talks about. Recipes that need a real namespace, cron
or a service outside sbdlq are skipped with the reason in the test's skip message.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from support.readme import FAILED, Block, Run, bash_blocks, run_lines, section

TOUR = bash_blocks(section("## A five-minute tour"))
RECIPES = {block.label: block for block in bash_blocks(section("## Recipes"))}

#: Recipes that can't run here, and why.
NEEDS_MORE = {
    "Cron alert when a DLQ grows": "a crontab line for a real namespace (--profile prod) and mail",
    "Nightly": "a real namespace (--profile prod) and /var/backups",
    "A CI step that cleans up after an integration": "a real namespace ($SB_NAMESPACE)",
    "Nightly namespace report": "a crontab line and a real namespace (--profile prod)",
    "Watch the namespace": "watches until Ctrl-C or a page-oncall command",
    "DLQ gauges for Prometheus": "a crontab line, a real namespace and node_exporter's directory",
    "Behind a proxy": "a real namespace behind an HTTP proxy",
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

#: A seed per runnable recipe: the demo, then the dead-letters its paragraph talks about.
#: The demo's orders queue has active messages; they are completed first so that the
#: `receive --dead-letter` of the seed takes the messages it just sent.
DRAIN = ["sbdlq emulator demo >/dev/null", "sbdlq emulator receive orders --max 1000 --complete >/dev/null"]


def misspelt_tenants(tmp: Path) -> None:
    """Three orders dead-lettered with tenant 'EU ' and a debug property."""
    sends = [
        f"""sbdlq emulator send orders --body '{{"id": {i}}}' --property 'tenant=EU ' --property debug=true"""
        for i in range(3)
    ]
    seed = [*DRAIN, *sends, "sbdlq emulator receive orders --max 3 --dead-letter --reason BadTenant >/dev/null"]
    ok(run_lines(seed, tmp))


def check_misspelt_tenants(tmp: Path, run: Run) -> None:
    assert "3 message(s) would be resubmitted" in run.stdout
    active = take_active(tmp, "orders")
    properties = [m["application_properties"] for m in active]
    assert [(p["tenant"], "debug" in p) for p in properties] == [("eu", False)] * 3
    assert sbdlq_json(tmp, "peek orders --all --where \"tenant = 'EU '\"") == []


def schema_errors(tmp: Path) -> None:
    """Orders whose `amount` is a string (two of them invoices), and a `billing` queue."""
    sends = [
        f"""sbdlq emulator send orders --subject {subject} --body '{{"id": {i}, "amount": "1{i}.50"}}'"""
        for i, subject in enumerate(["invoice", "order", "invoice", "order"])
    ]
    seed = [
        *DRAIN,
        "sbdlq emulator create queue billing >/dev/null",
        *sends,
        "sbdlq emulator receive orders --max 4 --dead-letter --reason SchemaError >/dev/null",
    ]
    ok(run_lines(seed, tmp))


def check_schema_errors(tmp: Path, run: Run) -> None:
    assert len((tmp / "orders.jsonl").read_text(encoding="utf-8").splitlines()) == 4
    replayed = take_active(tmp, "orders")
    assert [json.loads(m["body"]) for m in replayed] == [{"id": i, "amount": 10 + i + 0.5} for i in range(4)]
    invoices = take_active(tmp, "billing")
    assert [json.loads(m["body"])["id"] for m in invoices] == [0, 2]
    assert sbdlq_json(tmp, "peek orders --all --reason SchemaError") == []


class Recipe(NamedTuple):
    seed: Callable[[Path], None]
    check: Callable[[Path, Run], None]
    needs: tuple[str, ...] = ()


RUNNABLE = {
    "Repair a bad property and resubmit": Recipe(misspelt_tenants, check_misspelt_tenants),
    "Export, fix with jq, replay": Recipe(schema_errors, check_schema_errors, needs=("jq",)),
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
def test_recipe_runs_on_the_emulator(label: str, block: Block, tmp_path: Path) -> None:
    recipe = RUNNABLE[label]
    for tool in recipe.needs:
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} on PATH (.ci/run installs it)")
    recipe.seed(tmp_path)
    run = ok(run_lines(block.lines, tmp_path))
    recipe.check(tmp_path, run)
