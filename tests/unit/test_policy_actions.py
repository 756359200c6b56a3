"""A policy action is one file (issue 39): the registry is exactly the modules of `policy/actions/`,
every action writes every primitive, nothing else in the policy layer or `apply` names an action,
DESIGN names every action and key, and an action added to the registry alone runs end to end."""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support import Cli, Seeder

from sbdlq.backends.base import Backend
from sbdlq.policy import actions as actions_package
from sbdlq.policy.actions import ACTIONS, NOT_ACTIONS
from sbdlq.policy.actions.base import PolicyAction, StepContext
from sbdlq.policy.plan import Step, count_step
from sbdlq.policy.schema import PATH, STR, Key, Rule

ROOT = Path(__file__).resolve().parents[2]
ACTIONS_DIR = Path(actions_package.__file__).parent
#: The modules that run `apply` around the actions: none of them may name one.
DISPATCHERS = [*sorted((ROOT / "sbdlq" / "policy").glob("*.py")), ROOT / "sbdlq" / "cli" / "commands" / "apply.py"]


def test_the_registry_is_exactly_the_modules_of_the_folder() -> None:
    modules = {p.stem for p in ACTIONS_DIR.glob("*.py")} - {"__init__"} - NOT_ACTIONS
    assert set(ACTIONS) == modules
    for name, action in ACTIONS.items():
        # One module, named as the rule key, holds the action's whole class.
        assert type(action).__module__ == f"sbdlq.policy.actions.{name}"
        assert action.name == name
    assert list(ACTIONS) == ["resubmit", "purge", "alert"]  # the order every message lists them in
    assert len({action.order for action in ACTIONS.values()}) == len(ACTIONS)  # no two share a place


def test_every_action_writes_every_primitive() -> None:
    primitives = PolicyAction.__abstractmethods__
    assert primitives == {"describe", "run", "detail", "explain"}
    for action in ACTIONS.values():
        cls = type(action)
        assert not inspect.isabstract(cls)
        assert {name for name in primitives if name in vars(cls)} == primitives, cls
        assert isinstance(cls.order, int) and cls.keys, cls


def test_an_action_without_a_primitive_cannot_be_made() -> None:
    class NoRun(PolicyAction):
        name, order, keys = "norun", 9, {}

        def describe(self, step: Step) -> str:
            return ""

        def detail(self, step: Step) -> str:
            return ""

        def explain(self, rule: Rule) -> list[str]:
            return []

    with pytest.raises(TypeError, match="run"):
        NoRun()  # type: ignore[abstract]


def action_names_in(source: str, filename: str, names: frozenset[str] | set[str]) -> list[str]:
    """`file:line 'name'` for each string that is exactly an action's name (docstrings aside)."""
    return [
        f"{filename}:{node.lineno} {node.value!r}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and node.value in names
    ]


@pytest.mark.parametrize("path", DISPATCHERS, ids=lambda p: p.name)
def test_nothing_outside_the_actions_names_an_action(path: Path) -> None:
    assert action_names_in(path.read_text(encoding="utf-8"), path.name, set(ACTIONS)) == []


def test_the_name_check_sees_a_dispatch_by_string() -> None:
    source = 'def describe(rule):\n    if rule.action == "purge":\n        return {"alert": 1}\n'
    assert action_names_in(source, "plan.py", {"purge", "alert"}) == ["plan.py:2 'purge'", "plan.py:3 'alert'"]


def test_the_help_lists_the_actions_in_the_registry_order() -> None:
    # Written by hand (deriving it would load the policy layer on `--help`), so held here.
    from sbdlq.cli.commands.apply import apply
    from sbdlq.cli.main import COMMAND_HELP

    listed = f"({', '.join(ACTIONS)})"
    assert listed in COMMAND_HELP["apply"]
    assert listed in (apply.__doc__ or "")


def test_design_names_every_action_and_every_key() -> None:
    text = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    start = text.index("### `apply` (policy files)")
    section = text[start : text.index("\n#", start + 1)]
    missing = [f"{name}: {key}" for name, a in ACTIONS.items() for key in (name, *a.keys) if f"`{key}`" not in section]
    assert missing == []


class Tally(PolicyAction):
    """A made-up action: count the matches again when its turn comes and say how many."""

    name = "tally"
    order = 4
    counted = ("tallied",)
    keys: ClassVar[Mapping[str, Key]] = {"label": Key(STR, required=True), "folder": Key(PATH)}

    def describe(self, step: Step) -> str:
        return f"tally {step.matched} as {step.rule.option('label')}"

    async def run(self, backend: Backend, step: Step, context: StepContext) -> None:
        await count_step(backend, step, context.now)
        step.result = {"tallied": step.matched}

    def report(self, step: Step) -> dict[str, Any]:
        return {"label": step.rule.option("label"), "folder": step.rule.option("folder")}

    def detail(self, step: Step) -> str:
        return f"tallied {(step.result or {})['tallied']}"

    def explain(self, rule: Rule) -> list[str]:
        return [f"tally them as {rule.option('label')}. Nothing moves."]


@pytest.fixture
def tally(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry with one more action in it, as a new module in `policy/actions/` would make it."""
    monkeypatch.setitem(ACTIONS, "tally", Tally())
    yield


def test_an_action_in_the_registry_alone_loads_plans_runs_reports_and_explains(
    tally: None, cli: Cli, seed: Seeder, tmp_path: Path
) -> None:
    seed.queue("orders")
    seed.dead_letter("orders", 2, reason="Timeout")
    path = tmp_path / "p.yaml"
    path.write_text("rules:\n  - name: count them\n    entities: [orders]\n    tally: {label: daily, folder: out}\n")

    code, out, err = cli("apply", str(path), "-o", "json")
    assert code == 0, err
    assert "sbdlq: plan: rule 'count them' on orders: tally 2 as daily" in err
    (step,) = json.loads(out)
    assert (step["action"], step["status"], step["result"], step["label"]) == ("tally", "ok", {"tallied": 2}, "daily")
    assert step["folder"] == str(tmp_path / "out")  # a directory key is relative to the policy file, as `export`
    assert len(seed.dlq("orders")) == 2

    code, out, _ = cli("apply", str(path), "-o", "table")
    assert code == 0 and "tallied 2" in out
    # -o prometheus: the counts of its result it names, as outcomes of its messages series.
    code, out, _ = cli("apply", str(path), "-o", "prometheus")
    series = [line for line in out.splitlines() if line.startswith("sbdlq_apply_messages{")]
    assert code == 0 and [line.split('outcome="')[1] for line in series] == ['matched"} 2', 'tallied"} 2'], out
    code, out, _ = cli("apply", str(path), "--explain")
    assert code == 0 and "  tally them as daily. Nothing moves.\n" in out

    # The loader lists it, suggests it, refuses its options elsewhere, and requires its keys.
    for rule, says in [
        ("{name: r, entities: [q]}", "no action (give one of resubmit, purge, alert, tally)"),
        ("{name: r, entities: [q], taly: {}}", "unknown key 'taly' in a rule (did you mean 'tally'?)"),
        ("{name: r, entities: [q], purge: {label: x}}", "'label' is an option of tally, not of purge"),
        ("{name: r, entities: [q], tally: {}}", "tally needs `label`"),
    ]:
        path.write_text(f"rules:\n  - {rule}\n")
        code, out, err = cli("apply", str(path), "--yes")
        assert (code, out) == (2, "") and says in err, err
