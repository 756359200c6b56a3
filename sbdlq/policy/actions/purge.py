"""`purge`: export each matching message to a new file when `export` names a directory, then delete it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from sbdlq.policy.actions.base import PolicyAction, StepContext, at_most, export_file, purge_step
from sbdlq.policy.schema import PATH, TUNING, Key, Rule

if TYPE_CHECKING:
    from sbdlq.backends.base import Backend
    from sbdlq.policy.plan import Step


class Purge(PolicyAction):
    """Delete the rule's messages through `operations.purge` (export and fsync first, then delete)."""

    name = "purge"
    order = 2
    counted = ("purged", "exported", "failed")
    keys: ClassVar[Mapping[str, Key]] = {"export": Key(PATH), **TUNING}

    def deleting(self, step: Step) -> int:
        return step.matched

    def deletes(self, rule: Rule) -> bool:
        return True

    def describe(self, step: Step) -> str:
        export = step.rule.option("export")
        return f"{'export to ' + export + ' and ' if export else ''}delete {step.matched}"

    async def run(self, backend: Backend, step: Step, context: StepContext) -> None:
        export = export_file(step, context)
        selection = self.selection(step.rule, context.now)
        result = await purge_step(backend, step, selection, export, context.note, max_count=step.rule.option("max"))
        step.result = result.to_json()

    def detail(self, step: Step) -> str:
        r = step.result or {}
        return f"purged {r['purged']} of {r['selected']}" + (f", exported to {step.export[0]}" if step.export else "")

    def explain(self, rule: Rule) -> list[str]:
        export = rule.option("export")
        if export:
            return [f"export each to a new file in {export}, then delete it{at_most(rule)}."]
        return [f"delete them{at_most(rule)}, without keeping a copy."]


ACTION = Purge()
