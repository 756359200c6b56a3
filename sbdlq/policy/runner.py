"""Run a policy's planned steps in file order, each by its action through the same operation its command uses.

Each step is its rule's action (`policy/actions/`, `PolicyAction.run`): a resubmit rule is
`operations.resubmit` (send, then complete), a purge rule `operations.purge` (export and fsync,
then delete, then mark deleted), an alert rule the plan's count: there is no second moving loop,
so every rule keeps the commands' guarantees (kill -9, signals, duplicates bounded by
concurrency, or for a purge's export by batch_size). A step that fails is recorded and the next
one runs, unless its rule (or the file) says `stop_on_error: true`. Export files are named
(`actions/base.export_file`), one per rule, entity and run, and created with O_EXCL by the
purge when its first record is written: a name that exists is never written to, and a step
that deletes nothing (its matches taken by another receiver) leaves no file.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sbdlq.backends.base import Backend
from sbdlq.errors import SbdlqError
from sbdlq.operations.stopping import RunInterrupted
from sbdlq.policy.actions.base import StepContext
from sbdlq.policy.plan import UNMATCHED, Step
from sbdlq.policy.schema import Rule
from sbdlq.results import RunResult

#: Step statuses: planned (not run yet), dry_run, ok, fired (an alert over its threshold),
#: failed, skipped (after a stop_on_error failure), interrupted (SIGINT/SIGTERM).
OK, FIRED, FAILED, SKIPPED, DRY_RUN, INTERRUPTED = "ok", "fired", "failed", "skipped", "dry_run", "interrupted"


class PolicyInterrupted(Exception):
    """A signal stopped the run: the steps so far (the stopped one marked) and the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


async def run_policy(
    backend: Backend,
    steps: list[Step],
    *,
    now: datetime,
    run_id: str,
    dry_run: bool = False,
    note: Callable[[str], None] = lambda _: None,
) -> list[Step]:
    """Run the steps in order (a dry run only marks them); returns them with their results."""
    stopped = False
    for index, step in enumerate(steps):
        if step.status == UNMATCHED:
            continue  # a glob that matched nothing: its warning was the plan's
        if stopped:
            step.status = SKIPPED
            continue
        if step.status != FAILED:
            if dry_run:
                step.status = FIRED if step.rule.handler.fires(step) else DRY_RUN
                continue
            try:
                await _run_step(backend, step, now=now, run_id=run_id, rule_index=_rule_index(steps, index), note=note)
            except PolicyInterrupted:
                for later in steps[index + 1 :]:
                    later.status = SKIPPED
                raise
        if step.status == FAILED:
            note(f"warning: rule {step.rule.name!r} on {step.entity} failed: {step.error}")
            stopped = step.rule.stop_on_error
    return steps


def _rule_index(steps: list[Step], index: int) -> int:
    """The rule's number in the file (1-based), for export file names."""
    seen: list[Rule] = []
    for step in steps[: index + 1]:
        if not seen or seen[-1] is not step.rule:
            seen.append(step.rule)
    return len(seen)


async def _run_step(
    backend: Backend, step: Step, *, now: datetime, run_id: str, rule_index: int, note: Callable[[str], None]
) -> None:
    """One rule on one entity, by its action; a failure is the step's, a signal stops the run."""
    action = step.rule.handler
    try:
        await action.run(backend, step, StepContext(now=now, run_id=run_id, rule_index=rule_index, note=note))
        step.status = FAILED if step.error else FIRED if action.fires(step) else OK
    except RunInterrupted as stop:
        step.status, step.error = INTERRUPTED, "stopped by a signal"
        _record(step, stop.result)
        raise PolicyInterrupted(stop.signum) from None
    except SbdlqError as exc:
        step.status, step.error = FAILED, exc.line()


def _record(step: Step, result: RunResult) -> None:
    """A partial result goes where the action's result goes (the `then` purge's if that one stopped)."""
    if step.result is None:
        step.result = result.to_json()
    else:
        step.then_result = result.to_json()
