"""`alert`: count the rule's messages when its turn comes; over `above`, the run exits 3. Nothing moves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from sbdlq.policy.actions.base import PolicyAction, StepContext
from sbdlq.policy.schema import INT, Key, Rule

if TYPE_CHECKING:
    from sbdlq.backends.base import Backend
    from sbdlq.policy.plan import Step


class Alert(PolicyAction):
    """Fire (exit 3) when the DLQ holds more matching messages than `above`."""

    name = "alert"
    order = 3
    keys: ClassVar[Mapping[str, Key]] = {"above": Key(INT, minimum=0, required=True)}
    may_fire = True

    def describe(self, step: Step) -> str:
        above = step.rule.option("above")
        return f"alert if more than {above} (now {step.matched}: {'fires' if step.matched > above else 'quiet'})"

    async def run(self, backend: Backend, step: Step, context: StepContext) -> None:
        from sbdlq.policy.plan import count_step

        # Counted again: the rules before it in the file may have moved messages since the plan.
        await count_step(backend, step, context.now)
        if step.error is None:
            step.result = {"dead_letter": step.matched, "above": step.rule.option("above")}

    def fires(self, step: Step) -> bool:
        return step.matched > step.rule.option("above")

    def fired(self, step: Step) -> str:
        held, above = step.matched, step.rule.option("above")
        return f"sbdlq: alert {step.rule.name!r}: {step.entity} holds {held} matching message(s), above {above}"

    def detail(self, step: Step) -> str:
        r = step.result or {}
        return f"{r['dead_letter']} message(s), alert above {r['above']}"

    def explain(self, rule: Rule) -> list[str]:
        return [f"count them, and make the run exit 3 when there are more than {rule.option('above')}. Nothing moves."]


ACTION = Alert()
