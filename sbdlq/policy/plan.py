"""The plan of a policy run: each rule's entity globs matched against the namespace's listing, and
per rule and entity how many messages match and what will happen to them.

Counting reads only (a browse, or the DLQ's count when a rule selects everything); the runner
then acts through the commands' own operations, which count again under their locks.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sbdlq.addresses import Address, EntityPath, SubQueue, parse_entity
from sbdlq.backends.base import Backend
from sbdlq.models import EntityInfo
from sbdlq.operations.planning import plan_run
from sbdlq.policy.schema import THEN_KEEP, Policy, Rule
from sbdlq.selection import Selection

_GLOB_CHARS = frozenset("*?[")
#: The status of a glob's step when the glob matches no entity: a warning, nothing to run.
UNMATCHED = "unmatched"


@dataclass
class Step:
    """One rule on one entity: what the plan found, then what the run did."""

    rule: Rule
    entity: str
    #: Messages the rule's action takes (resubmit: those below max_attempts).
    matched: int = 0
    #: resubmit with max_attempts: messages that reached it (handled by `then`).
    at_max: int = 0
    #: The plan's words for it ("resubmit 3 to orders; 1 at max_attempts 3: keep").
    will: str = ""
    status: str = "planned"
    error: str | None = None
    #: what the plan warns of (a glob that matches nothing), shown with the plan and in the JSON
    warning: str | None = None
    #: The operation's result JSON (resubmit, purge), or the alert's count.
    result: dict[str, Any] | None = None
    then_result: dict[str, Any] | None = None
    export: list[str] = field(default_factory=list)

    @property
    def address(self) -> Address:
        return Address(parse_entity(self.entity), SubQueue.DEAD_LETTER)


def is_glob(pattern: str) -> bool:
    return any(ch in _GLOB_CHARS for ch in pattern)


def matching(rule: Rule, listing: list[EntityInfo]) -> list[str]:
    """The queues and subscriptions the rule's names and globs match (case-insensitive, as Service Bus
    names are), in name order whatever order the backend lists them in; a plain name that is not
    there is kept, to fail as not found."""
    paths = [info.path for info in listing if info.kind != "topic"]
    chosen: list[str] = []
    for pattern in rule.entities:
        if is_glob(pattern):
            hits = [p for p in paths if fnmatch.fnmatchcase(p.lower(), pattern.lower())]
        else:
            wanted = str(parse_entity(pattern)).lower()
            hits = [p for p in paths if p.lower() == wanted] or [pattern]
        chosen.extend(h for h in hits if h.lower() not in {c.lower() for c in chosen})
    return sorted(chosen, key=str.lower)


def unmatched_globs(rule: Rule, listing: list[EntityInfo]) -> list[str]:
    """The rule's globs that match no queue or subscription of the listing."""
    paths = [info.path.lower() for info in listing if info.kind != "topic"]
    return [p for p in rule.entities if is_glob(p) and not any(fnmatch.fnmatchcase(path, p.lower()) for path in paths)]


def selection_of(rule: Rule, now: datetime) -> Selection:
    """The rule's selection, its relative times counted from `now`."""
    from sbdlq.selection import build_selection

    return build_selection(**rule.selection, older_than=rule.older_than, now=now)


def action_selection(rule: Rule, now: datetime) -> Selection:
    """What the rule's action takes: a resubmit with max_attempts leaves those that reached it."""
    base = selection_of(rule, now)
    limit = rule.option("max_attempts")
    return base if limit is None else replace(base, attempts_below=limit)


def exhausted_selection(rule: Rule, now: datetime) -> Selection:
    """A resubmit's messages that reached max_attempts (for its `then`)."""
    return replace(selection_of(rule, now), attempts_from=rule.option("max_attempts"))


async def plan_policy(
    backend: Backend, policy: Policy, *, now: datetime, note: Callable[[str], None] = lambda _: None
) -> list[Step]:
    """Every rule's steps, in file order: entities matched now, messages counted now."""
    listing = await backend.list_entities()
    steps: list[Step] = []
    for rule in policy.rules:
        entities = matching(rule, listing)
        for glob in unmatched_globs(rule, listing):
            # A typo in a glob must not read as "nothing to do": say it in the plan and the JSON.
            warning = f"{glob} matches no queue or subscription"
            note(f"warning: rule {rule.name!r}: {warning}")
            steps.append(Step(rule, glob, status=UNMATCHED, warning=warning, will=f"nothing: {warning}"))
        for entity in entities:
            step = Step(rule, entity)
            await count_step(backend, step, now)
            _name_the_nearest(step, listing)
            steps.append(step)
    return steps


def _name_the_nearest(step: Step, listing: list[EntityInfo]) -> None:
    """A plain name the namespace does not have: its error says which names are near."""
    from sbdlq.nearest import entity_hint

    paths = [info.path for info in listing]
    if step.error is None or step.entity.lower() in {p.lower() for p in paths}:
        return
    hint = entity_hint(f"'{step.entity}'", paths)
    if hint is not None and hint not in step.error:
        step.error = f"{step.error} ({hint})"
        step.will = describe_step(step)


async def count_step(backend: Backend, step: Step, now: datetime) -> None:
    """Fill in how many messages the step matches and what will happen; a failure marks the step failed."""
    from sbdlq.errors import SbdlqError

    rule = step.rule
    try:
        address = step.address
        if rule.option("max_attempts") is None:
            step.matched = await _count(backend, address, action_selection(rule, now), rule.option("max"))
        else:
            step.matched, step.at_max = await _split(backend, address, rule, now)
    except SbdlqError as exc:  # a plain name that is not there (EntityNotFound), an unreachable broker ...
        step.status, step.error = "failed", exc.line()
    step.will = describe_step(step)


async def _count(backend: Backend, address: Address, selection: Selection, limit: int | None) -> int:
    return (await plan_run(backend, address, selection, max_count=limit, scan=False)).selected


async def _split(backend: Backend, address: Address, rule: Rule, now: datetime) -> tuple[int, int]:
    """One browse of a max_attempts rule's matches: (below max_attempts, up to `max`; at it or past)."""
    from sbdlq.models import attempt_of
    from sbdlq.operations.browse import iter_messages

    limit, most = rule.option("max_attempts"), rule.option("max")
    below = at_max = 0
    async for m in iter_messages(backend, address, selection=selection_of(rule, now)):
        if attempt_of(m.application_properties) >= limit:
            at_max += 1
        elif most is None or below < most:
            below += 1
    return below, at_max


def describe_step(step: Step) -> str:
    """The plan's words for a step."""
    rule = step.rule
    if step.error is not None:
        return f"cannot run: {step.error}"
    if rule.action == "alert":
        above = rule.option("above")
        return f"alert if more than {above} (now {step.matched}: {'fires' if step.matched > above else 'quiet'})"
    if rule.action == "purge":
        export = rule.option("export")
        return f"{'export to ' + export + ' and ' if export else ''}delete {step.matched}"
    target = resubmit_target(step)
    words = f"resubmit {step.matched} to {target}"
    limit = rule.option("max_attempts")
    if limit is not None:
        then = rule.option("then", THEN_KEEP)
        handled = "keep in the DLQ" if then == THEN_KEEP else f"export to {rule.option('export')} and delete"
        words += f"; {step.at_max} at max_attempts {limit}: {handled}"
    return words


def resubmit_target(step: Step) -> EntityPath:
    """Where the step's resubmit sends: `to`, else as the command does (a subscription's: its topic)."""
    from sbdlq.addresses import resubmit_target

    return resubmit_target(step.address, step.rule.option("to"))
