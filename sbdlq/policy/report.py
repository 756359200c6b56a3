"""What `apply` reports: each step as JSON (the commands' result shapes inside), as a table row,
and as Prometheus text for node_exporter's textfile collector; and the run's exit status."""

from __future__ import annotations

import time
from typing import Any

from sbdlq.errors import ExitStatus
from sbdlq.output.prometheus import Family
from sbdlq.policy.plan import UNMATCHED, Step
from sbdlq.policy.runner import FAILED, FIRED, INTERRUPTED

#: The table's columns (the keys of step_json they show).
COLUMNS = ("rule", "entity", "action", "matched", "status", "detail")


def step_json(step: Step) -> dict[str, Any]:
    """One rule on one entity: what matched, what was done (the command's result shape), what failed."""
    rule = step.rule
    doc: dict[str, Any] = {
        "rule": rule.name,
        "entity": step.entity,
        "action": rule.action,
        "status": step.status,
        "matched": step.matched,
        "error": step.error,
        "warning": step.warning,
        "result": step.result,
        "export": list(step.export),
    }
    return doc | rule.handler.report(step)


def detail(step: Step, *, planned: bool) -> str:
    """The table's last column: the plan's words, or what the run did."""
    if planned or step.result is None:
        return step.error or step.will
    return step.rule.handler.detail(step) + (f" ({step.error})" if step.error else "")


def exit_status(steps: list[Step]) -> ExitStatus:
    """1 when any step failed; else 3 when an alert fired; else 0."""
    if any(s.status in (FAILED, INTERRUPTED) for s in steps):
        return ExitStatus.FAILED
    if any(s.status == FIRED for s in steps):
        return ExitStatus.THRESHOLD
    return ExitStatus.OK


_FAMILIES = (
    ("sbdlq_apply_messages", "Messages a policy rule matched and handled on an entity in the last apply run."),
    ("sbdlq_apply_failed", "1 when the rule failed on the entity in the last apply run, else 0."),
    ("sbdlq_apply_alert_fired", "1 when the alert rule fired on the entity in the last apply run, else 0."),
    ("sbdlq_apply_last_run_timestamp_seconds", "When the last apply run of this policy ended (Unix time)."),
    ("sbdlq_apply_exit_status", "The exit status of the last apply run of this policy."),
)


def _outcomes(step: Step) -> dict[str, int]:
    """The counts worth a series: matched, the counts of its result the action names, then its own."""
    out = {"matched": step.matched}
    r = step.result or {}
    for key in step.rule.handler.counted:
        if key in r:
            out[key] = int(r[key])
    out.update(step.rule.handler.outcomes(step))
    return out


def prometheus(policy: str, steps: list[Step], status: ExitStatus, *, now: float | None = None) -> list[Family]:
    """The run as gauges, every family in order (one without series too); `-o prometheus` writes them."""
    pol = {"policy": policy}
    family = {name: Family(name, help_) for name, help_ in _FAMILIES}
    for step in steps:
        if step.status == UNMATCHED:
            continue  # a glob is no entity: no series of its own
        labels = {**pol, "rule": step.rule.name, "entity": step.entity}
        for outcome, n in _outcomes(step).items():
            family["sbdlq_apply_messages"].add({**labels, "action": step.rule.action, "outcome": outcome}, n)
        family["sbdlq_apply_failed"].add(labels, int(step.status in (FAILED, INTERRUPTED)))
        if step.rule.handler.may_fire:
            family["sbdlq_apply_alert_fired"].add(labels, int(step.status == FIRED))
    family["sbdlq_apply_last_run_timestamp_seconds"].add(pol, int(now or time.time()))
    family["sbdlq_apply_exit_status"].add(pol, int(status))
    return list(family.values())
