"""What every policy action is: its keys, its checks, its plan, its run, its report and its words.

An action is one module beside this one holding one `PolicyAction` subclass and an instance of
it named `ACTION`; the registry (`policy/actions/__init__.py`) finds it there, and the loader,
the plan, the runner, the report, `--explain` and `apply` read the action through
`Rule.handler`, never by its name. The helpers below are the pieces two actions share (a purge
with its export file, a result that left messages behind), so that no action has its own loop.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sbdlq.operations.edits import CopyEdits
from sbdlq.policy.schema import Key, Rule

if TYPE_CHECKING:
    from sbdlq.backends.base import Backend
    from sbdlq.policy.plan import Step
    from sbdlq.results import RunResult
    from sbdlq.selection import Selection

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class OptionRefused(Exception):
    """An action's options that cannot run together; the loader points it at the action's line."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True)
class StepContext:
    """What a step's run is given besides the step: the run's clock and id, the rule's number, the notes."""

    now: datetime
    run_id: str
    #: The rule's number in the file (1-based), for export file names.
    rule_index: int
    note: Callable[[str], None]


class PolicyAction(ABC):
    """One action a rule may take; every primitive below is one step of `sbdlq apply`."""

    #: The action's key in a rule (`resubmit: {...}`), its name in the JSON, the table and the metrics.
    name: ClassVar[str]
    #: Its place where the actions are listed ("give one of resubmit, purge, alert").
    order: ClassVar[int]
    #: Its options as the loader checks them (name → kind, bounds, whether required).
    keys: ClassVar[Mapping[str, Key]]

    def check(self, options: Mapping[str, Any]) -> CopyEdits:
        """Checks across the options beyond each key's kind (OptionRefused); the copies' edits."""
        return CopyEdits()

    def deleting(self, step: Step) -> int:
        """How many of the step's messages the run may delete (0: the rule deletes nothing here)."""
        return 0

    def deletes(self, rule: Rule) -> bool:
        """Whether the rule may delete messages (it needs --yes off a terminal)."""
        return False

    def selection(self, rule: Rule, now: datetime) -> Selection:
        """The messages the action takes: the rule's selection, its relative times counted from `now`."""
        from sbdlq.policy.plan import selection_of

        return selection_of(rule, now)

    async def count(self, backend: Backend, step: Step, now: datetime) -> None:
        """Fill in how many messages the step matches (its `matched`); reads only."""
        from sbdlq.policy.plan import count_matches

        rule = step.rule
        step.matched = await count_matches(backend, step.address, self.selection(rule, now), rule.option("max"))

    @abstractmethod
    def describe(self, step: Step) -> str:
        """The plan's words for a step that can run ("delete 3")."""

    @abstractmethod
    async def run(self, backend: Backend, step: Step, context: StepContext) -> None:
        """Do it through `operations/` (never a loop of its own): fill in the step's result and error."""

    #: Whether a step of it can fire (exit 3): its steps get the `sbdlq_apply_alert_fired` series.
    may_fire: ClassVar[bool] = False

    def fires(self, step: Step) -> bool:
        """Whether the step makes the run exit 3 (an alert over its threshold)."""
        return False

    def fired(self, step: Step) -> str:
        """The stderr line of a step that fired."""
        return f"sbdlq: {self.name} {step.rule.name!r}: {step.entity} fired"

    def report(self, step: Step) -> dict[str, Any]:
        """What the action adds to the step's JSON after the shared keys."""
        return {}

    #: The counts of its result (its command's JSON) that `-o prometheus` writes as outcomes of
    #: `sbdlq_apply_messages`, after `matched` and in this order: those the result holds.
    counted: ClassVar[tuple[str, ...]] = ()

    def outcomes(self, step: Step) -> dict[str, int]:
        """Its own `sbdlq_apply_messages` outcomes, after matched and its result's `counted`."""
        return {}

    @abstractmethod
    def detail(self, step: Step) -> str:
        """The table's words for what the run did (the step has a result)."""

    @abstractmethod
    def explain(self, rule: Rule) -> list[str]:
        """The action in words for `--explain`, one line each."""


def at_most(rule: Rule) -> str:
    """ " (at most N per run)" for a rule with `max`, else ""."""
    return f" (at most {rule.option('max')} per run)" if rule.option("max") else ""


def checked(step: Step, result: RunResult) -> RunResult:
    """A result that left selected messages behind fails the step (as the command exits 1)."""
    left = None if result.dry_run else result.left_over()
    if left is not None and step.error is None:
        step.error = left
    return result


async def purge_step(
    backend: Backend,
    step: Step,
    selection: Selection,
    export: Path | None,
    note: Callable[[str], None],
    *,
    max_count: int | None,
) -> RunResult:
    """`operations.purge` on the step's DLQ (export first when `export` is named); the file listed once made."""
    from sbdlq.operations.purge import purge

    rule = step.rule
    try:
        result = await purge(
            backend,
            step.address,
            selection=selection,
            max_count=max_count,
            export=export,
            export_new=True,
            batch_size=rule.option("batch_size", 500),
            concurrency=rule.option("concurrency", 32),
            note=note,
        )
    finally:
        # Listed when the purge made it (a signal or failure mid-run too): it holds what was deleted.
        if export is not None and os.path.lexists(export):
            step.export.append(str(export))
    return checked(step, result)


def export_file(step: Step, context: StepContext) -> Path | None:
    """The name of a new export file for this rule, entity and run (none when nothing will be deleted).

    Named `<entity>-<UTC time>-<run id>-r<rule>.jsonl`; the purge creates it with O_EXCL when its
    first record is written: an existing file is never appended to or replaced, even by a run that
    reuses a name, and a purge that deletes nothing makes none.
    """
    from sbdlq.errors import OperationFailed

    rule = step.rule
    directory = rule.option("export")
    if directory is None or rule.handler.deleting(step) == 0:
        return None
    folder = Path(directory).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise OperationFailed(f"cannot create export directory {folder}: {exc.strerror or exc}") from None
    stamp = context.now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return folder / f"{_UNSAFE.sub('_', step.entity)}-{stamp}-{context.run_id}-r{context.rule_index}.jsonl"
