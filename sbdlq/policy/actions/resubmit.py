"""`resubmit`: send a copy of each matching message (edited as the keys say), then complete it; with
`max_attempts`, the messages that reached it are kept or, with `then: purge`, exported and deleted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sbdlq.errors import BadInput
from sbdlq.operations.edits import CopyEdits
from sbdlq.policy.actions.base import (
    OptionRefused,
    PolicyAction,
    StepContext,
    at_most,
    checked,
    export_file,
    purge_step,
)
from sbdlq.policy.schema import BOOL, CHOICE, DURATION, EDIT_KEYS, INT, NUMBER, PATH, STR, TUNING, Key, Rule

if TYPE_CHECKING:
    from pathlib import Path

    from sbdlq.addresses import EntityPath
    from sbdlq.backends.base import Backend
    from sbdlq.policy.plan import Step
    from sbdlq.results import RunResult
    from sbdlq.selection import Selection

#: What `then` may do with a message that reached `max_attempts`.
THEN_KEEP, THEN_PURGE = "keep", "purge"


class Resubmit(PolicyAction):
    """Resubmit through `operations.resubmit` (send, then complete), and `then` through `operations.purge`."""

    name = "resubmit"
    order = 1
    counted = ("resubmitted", "failed", "unroutable")
    keys: ClassVar[Mapping[str, Key]] = {
        "to": Key(STR),
        "max_attempts": Key(INT, minimum=1),
        "then": Key(CHOICE, choices=(THEN_KEEP, THEN_PURGE)),
        "export": Key(PATH),
        "new_message_id": Key(BOOL),
        "keep_dead_letter_properties": Key(BOOL),
        "fan_out": Key(BOOL),
        "only_this_subscription": Key(BOOL),
        "allow_unverified_routing": Key(BOOL),
        "rate": Key(NUMBER, above_zero=True),
        "spread": Key(DURATION),
        **TUNING,
        **EDIT_KEYS,
    }

    def check(self, options: Mapping[str, Any]) -> CopyEdits:
        if options.get("then") == THEN_PURGE and "export" not in options:
            raise OptionRefused(
                "then: purge needs `export` (a directory): messages are exported before they are deleted"
            )
        if "spread" in options:
            from sbdlq.operations.spread import SpreadOptions, check_spread

            try:
                check_spread(SpreadOptions(options["spread"]), options.get("rate"))
            except BadInput as exc:
                raise OptionRefused(f"spread: {exc.message}") from None
        if "then" in options and "max_attempts" not in options:
            raise OptionRefused("`then` says what happens at max_attempts: give max_attempts too")
        if "to" in options:
            from sbdlq.addresses import send_target

            try:
                send_target(options["to"])
            except BadInput as exc:
                raise OptionRefused(exc.line()) from None
        return _edits(options)

    def deleting(self, step: Step) -> int:
        return step.at_max if step.rule.option("then") == THEN_PURGE else 0

    def deletes(self, rule: Rule) -> bool:
        return rule.option("then") == THEN_PURGE

    def selection(self, rule: Rule, now: datetime) -> Selection:
        # With max_attempts, the messages that reached it are not resubmitted (`then` has them).
        base = super().selection(rule, now)
        limit = rule.option("max_attempts")
        return base if limit is None else replace(base, attempts_below=limit)

    async def count(self, backend: Backend, step: Step, now: datetime) -> None:
        if step.rule.option("max_attempts") is None:
            await super().count(backend, step, now)
        else:
            step.matched, step.at_max = await _split(backend, step, now)

    def describe(self, step: Step) -> str:
        rule = step.rule
        words = f"resubmit {step.matched} to {target(step)}"
        limit = rule.option("max_attempts")
        if limit is not None:
            then = rule.option("then", THEN_KEEP)
            handled = "keep in the DLQ" if then == THEN_KEEP else f"export to {rule.option('export')} and delete"
            words += f"; {step.at_max} at max_attempts {limit}: {handled}"
        return words

    async def run(self, backend: Backend, step: Step, context: StepContext) -> None:
        export = export_file(step, context)
        step.result = (await self._resubmit(backend, step, context)).to_json()
        if "spread" in step.result:
            # Each copy's number is in the spread record: the report keeps the spread's id and window.
            step.result["spread"].pop("copies", None)
        if step.rule.option("max_attempts") is not None:
            step.then_result = await self._then(backend, step, context, export)

    async def _resubmit(self, backend: Backend, step: Step, context: StepContext) -> RunResult:
        from sbdlq.operations.resubmit import resubmit
        from sbdlq.operations.spread import SpreadOptions
        from sbdlq.results import ResubmitResult

        rule = step.rule
        if step.matched == 0:
            return ResubmitResult()
        result = await resubmit(
            backend,
            step.address,
            target(step),
            selection=self.selection(rule, context.now),
            max_count=rule.option("max"),
            batch_size=rule.option("batch_size", 100),
            concurrency=rule.option("concurrency", 32),
            rate=rule.option("rate"),
            new_message_id=rule.option("new_message_id", False),
            keep_dead_letter_properties=rule.option("keep_dead_letter_properties", False),
            allow_unverified_routing=rule.option("allow_unverified_routing", False),
            edits=rule.edits,
            fan_out=rule.option("fan_out", False),
            only_this_subscription=rule.option("only_this_subscription", False),
            spread=None if rule.option("spread") is None else SpreadOptions(rule.option("spread")),
            note=context.note,
        )
        return checked(step, result)

    async def _then(self, backend: Backend, step: Step, context: StepContext, export: Path | None) -> dict[str, Any]:
        """What `then` did with the messages that reached max_attempts: kept (counted) or exported and purged."""
        from sbdlq.results import PurgeResult

        rule = step.rule
        if rule.option("then") != THEN_PURGE:
            return {"then": THEN_KEEP, "kept": step.at_max}
        if step.at_max == 0:
            return {"then": THEN_PURGE, **PurgeResult().to_json()}
        result = await purge_step(backend, step, _exhausted(rule, context.now), export, context.note, max_count=None)
        return {"then": THEN_PURGE, **result.to_json()}

    def outcomes(self, step: Step) -> dict[str, int]:
        if step.rule.option("max_attempts") is None:
            return {}
        out = {"at_max_attempts": step.at_max}
        then = step.then_result or {}
        for key, name in (("kept", "kept"), ("purged", "then_purged"), ("exported", "then_exported")):
            if key in then:
                out[name] = int(then[key])
        return out

    def report(self, step: Step) -> dict[str, Any]:
        limit = step.rule.option("max_attempts")
        if limit is None:
            return {}
        return {"max_attempts": limit, "at_max_attempts": step.at_max, "then": step.then_result}

    def detail(self, step: Step) -> str:
        r = step.result or {}
        text = f"resubmitted {r['resubmitted']} of {r['selected']}"
        if r.get("spread"):
            text += f", scheduled over {step.rule.option('spread')} (spread {r['spread']['id']})"
        then = step.then_result or {}
        if then.get("then") == THEN_KEEP:
            text += f"; {then['kept']} at max_attempts kept"
        elif then:
            text += f"; {then['purged']} at max_attempts purged" + (f" to {step.export[-1]}" if step.export else "")
        return text

    def explain(self, rule: Rule) -> list[str]:
        from sbdlq.policy.explain import value_words

        to = rule.option("to")
        out = [
            f"send a copy of each to {to if to else 'its queue (a subscription: its topic)'}, then remove it from "
            f"the DLQ{at_most(rule)}."
        ]
        if rule.option("spread"):
            out.append(f"The copies are scheduled evenly over {rule.option('spread')} from the run, not sent at once.")
        edits = [f"{key} {value_words(rule.options[key])}" for key in EDIT_KEYS if key in rule.options]
        if edits:
            out.append("Each copy is edited: " + ", ".join(edits) + ".")
        limit = rule.option("max_attempts")
        if limit is not None:
            out.append(f"A message resubmitted {limit} time(s) already (sbdlq-attempt {limit}) is not sent again:")
            if rule.option("then") == THEN_PURGE:
                out.append(f"  it is exported to a new file in {rule.option('export')}, then deleted.")
            else:
                out.append("  it stays in the DLQ, counted as kept.")
        return out


def target(step: Step) -> EntityPath:
    """Where the step's resubmit sends: `to`, else as the command does (a subscription's: its topic)."""
    from sbdlq.addresses import resubmit_target

    return resubmit_target(step.address, step.rule.option("to"))


def _exhausted(rule: Rule, now: datetime) -> Selection:
    """The rule's messages that reached max_attempts (for its `then`)."""
    from sbdlq.policy.plan import selection_of

    return replace(selection_of(rule, now), attempts_from=rule.option("max_attempts"))


async def _split(backend: Backend, step: Step, now: datetime) -> tuple[int, int]:
    """One browse of a max_attempts rule's matches: (below max_attempts, up to `max`; at it or past)."""
    from sbdlq.models import attempt_of
    from sbdlq.operations.browse import iter_messages
    from sbdlq.policy.plan import selection_of

    rule = step.rule
    limit, most = rule.option("max_attempts"), rule.option("max")
    below = at_max = 0
    async for m in iter_messages(backend, step.address, selection=selection_of(rule, now)):
        if attempt_of(m.application_properties) >= limit:
            at_max += 1
        elif most is None or below < most:
            below += 1
    return below, at_max


def _edits(options: Mapping[str, Any]) -> CopyEdits:
    """The edit keys as the commands' CopyEdits (checked the same way)."""
    from sbdlq.operations.edits import EDIT_OPTIONS, compile_edits

    given = {o.keyword: options[o.keyword] for o in EDIT_OPTIONS if o.keyword in options}
    try:
        return compile_edits(given, keep_dead_letter_properties=bool(options.get("keep_dead_letter_properties")))
    except BadInput as exc:
        raise OptionRefused(f"resubmit: {exc.line()}") from None


ACTION = Resubmit()
