"""Run a policy's planned steps in file order, each through the same operation its command uses.

A resubmit rule is `operations.resubmit` (send, then complete), a purge rule `operations.purge`
(export and fsync, then delete, then mark deleted), an alert rule the plan's count: there is no
second moving loop here, so every rule keeps the commands' guarantees (kill -9, signals,
duplicates bounded by concurrency, or for a purge's export by batch_size). A step that fails is
recorded and the next one runs, unless its rule (or the file) says `stop_on_error: true`.
Export files are named here, one per rule, entity and run, and created with O_EXCL by the
purge when its first record is written: a name that exists is never written to, and a step
that deletes nothing (its matches taken by another receiver) leaves no file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sbdlq.backends.base import Backend
from sbdlq.errors import OperationFailed, SbdlqError
from sbdlq.operations.stopping import RunInterrupted
from sbdlq.policy.plan import UNMATCHED, Step, action_selection, count_step, exhausted_selection, resubmit_target
from sbdlq.policy.schema import THEN_PURGE, Rule
from sbdlq.results import PurgeResult, ResubmitResult, RunResult

#: Step statuses: planned (not run yet), dry_run, ok, fired (an alert over its threshold),
#: failed, skipped (after a stop_on_error failure), interrupted (SIGINT/SIGTERM).
OK, FIRED, FAILED, SKIPPED, DRY_RUN, INTERRUPTED = "ok", "fired", "failed", "skipped", "dry_run", "interrupted"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


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
                step.status = FIRED if _fires(step) else DRY_RUN
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


def _fires(step: Step) -> bool:
    return step.rule.action == "alert" and step.matched > step.rule.option("above")


async def _run_step(
    backend: Backend, step: Step, *, now: datetime, run_id: str, rule_index: int, note: Callable[[str], None]
) -> None:
    """One rule on one entity; a failure is the step's, a signal stops the run."""
    rule = step.rule
    try:
        if rule.action == "alert":
            # Counted again: the rules before it in the file may have moved messages since the plan.
            await count_step(backend, step, now)
            if step.error is not None:
                step.status = FAILED
                return
            step.result = {"dead_letter": step.matched, "above": rule.option("above")}
            step.status = FIRED if _fires(step) else OK
            return
        export = _export_file(rule, step, now, run_id, rule_index)
        if rule.action == "purge":
            step.result = (await _purge(backend, step, action_selection(rule, now), export, note)).to_json()
        else:
            step.result = (await _resubmit(backend, step, now, note)).to_json()
            if "spread" in step.result:
                # Each copy's number is in the spread record: the report keeps the spread's id and window.
                step.result["spread"].pop("copies", None)
            if rule.option("max_attempts") is not None:
                step.then_result = await _then(backend, step, now, export, note)
        step.status = FAILED if step.error else OK
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


def _check(step: Step, result: RunResult) -> RunResult:
    """A result that left selected messages behind fails the step (as the command exits 1)."""
    left = None if result.dry_run else result.left_over()
    if left is not None and step.error is None:
        step.error = left
    return result


async def _resubmit(backend: Backend, step: Step, now: datetime, note: Callable[[str], None]) -> RunResult:
    from sbdlq.operations.resubmit import resubmit
    from sbdlq.operations.spread import SpreadOptions

    rule = step.rule
    if step.matched == 0:
        return ResubmitResult()
    result = await resubmit(
        backend,
        step.address,
        resubmit_target(step),
        selection=action_selection(rule, now),
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
        note=note,
    )
    return _check(step, result)


async def _purge(
    backend: Backend, step: Step, selection: Any, export: Path | None, note: Callable[[str], None]
) -> RunResult:
    from sbdlq.operations.purge import purge

    rule = step.rule
    try:
        result = await purge(
            backend,
            step.address,
            selection=selection,
            max_count=rule.option("max") if rule.action == "purge" else None,
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
    return _check(step, result)


async def _then(
    backend: Backend, step: Step, now: datetime, export: Path | None, note: Callable[[str], None]
) -> dict[str, Any]:
    """What `then` did with the messages that reached max_attempts: kept (counted) or exported and purged."""
    rule = step.rule
    if rule.option("then") != THEN_PURGE:
        return {"then": "keep", "kept": step.at_max}
    if step.at_max == 0:
        return {"then": "purge", **PurgeResult().to_json()}
    result = await _purge(backend, step, exhausted_selection(rule, now), export, note)
    return {"then": "purge", **result.to_json()}


def _export_file(rule: Rule, step: Step, now: datetime, run_id: str, rule_index: int) -> Path | None:
    """The name of a new export file for this rule, entity and run (none when nothing will be deleted).

    Named `<entity>-<UTC time>-<run id>-r<rule>.jsonl`; the purge creates it with O_EXCL when its
    first record is written: an existing file is never appended to or replaced, even by a run that
    reuses a name, and a purge that deletes nothing makes none.
    """
    directory = rule.option("export")
    deleting = step.matched if rule.action == "purge" else step.at_max if rule.option("then") == THEN_PURGE else 0
    if directory is None or deleting == 0:
        return None
    folder = Path(directory).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise OperationFailed(f"cannot create export directory {folder}: {exc.strerror or exc}") from None
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return folder / f"{_UNSAFE.sub('_', step.entity)}-{stamp}-{run_id}-r{rule_index}.jsonl"
