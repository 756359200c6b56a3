"""The plan of a policy run: each rule's entity globs matched against the namespace's listing, and
per rule and entity how many messages match and what will happen to them.

Counting reads only (a browse, or the DLQ's count when a rule selects everything); what a step
counts and how the plan says it are its action's (`PolicyAction.count`, `describe`); the runner
then acts through the commands' own operations, which count again under their locks.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sbdlq.addresses import Address, SubQueue, parse_entity
from sbdlq.backends.base import Backend
from sbdlq.models import EntityInfo
from sbdlq.operations.planning import plan_run
from sbdlq.policy.schema import Policy, Rule
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

    try:
        await step.rule.handler.count(backend, step, now)
    except SbdlqError as exc:  # a plain name that is not there (EntityNotFound), an unreachable broker ...
        step.status, step.error = "failed", exc.line()
    step.will = describe_step(step)


async def count_matches(backend: Backend, address: Address, selection: Selection, limit: int | None) -> int:
    """How many messages of the DLQ at `address` the selection takes, up to `limit` (a browse or the count)."""
    return (await plan_run(backend, address, selection, max_count=limit, scan=False)).selected


def describe_step(step: Step) -> str:
    """The plan's words for a step."""
    if step.error is not None:
        return f"cannot run: {step.error}"
    return step.rule.handler.describe(step)
