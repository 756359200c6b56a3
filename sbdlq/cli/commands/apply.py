"""`sbdlq apply POLICY.yaml`: load and check the policy, print its plan, run its rules, report.

The rules are run by sbdlq/policy (through the commands' own operations); this module only
parses the options, holds the policy's lock, asks or requires --yes for rules that delete,
renders, and turns the run into its exit status (0 done, 3 an alert fired, 1 a rule failed,
2 a bad file).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from sbdlq import terminal
from sbdlq.cli.completion import complete_apply_output
from sbdlq.cli.error_path import guarded, handled
from sbdlq.cli.notes import err, note
from sbdlq.cli.settings import Settings, requested_output
from sbdlq.cli.target import open_target
from sbdlq.errors import BadInput, ExitStatus
from sbdlq.output.formats import FORMATS, offer_help, outputs

#: What `apply -o` writes (output/formats.py): every command's formats but those that hold only a
#: table's columns (tsv: a step's result is nested), and those offered to apply by name (prometheus).
APPLY_OUTPUTS = outputs("apply", nested=True)

PolicyArg = Annotated[str, typer.Argument(help="The policy file (YAML).", show_default=False, metavar="POLICY.yaml")]


ApplyOutput = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        autocompletion=complete_apply_output,
        help=offer_help("apply", nested=True),
        rich_help_panel="Output",
        show_default=False,
    ),
]


def apply(
    ctx: typer.Context,
    policy: PolicyArg,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Run rules that delete without asking (required off a terminal).")
    ] = False,
    explain: Annotated[
        bool, typer.Option("--explain", help="Say what each rule does, in words; read no broker.")
    ] = False,
    output: ApplyOutput = None,
) -> None:
    """Run a policy file's rules (resubmit, purge, alert) in order, e.g. from cron."""
    from sbdlq.policy.loader import load_policy

    with handled(ctx) as s:
        loaded = load_policy(policy)
        if explain:
            from sbdlq.policy.explain import explain as words

            sys.stdout.write(words(loaded))
            return
        fmt = _format(s, output)
        if loaded.deletes and not dry_run:
            names = ", ".join(repr(r.name) for r in loaded.rules if r.deletes)
            refusal = f"{policy} has rules that delete ({names}): apply needs --yes when stdin is not a terminal"
            terminal.must_ask(yes, BadInput(refusal))
    if dry_run:
        steps, stop = guarded(ctx, lambda st: _apply(st, loaded, dry_run=True, ask=False))
    else:
        from sbdlq.policy.lock import policy_lock

        with handled(ctx), policy_lock(policy):
            steps, stop = guarded(ctx, lambda st: _apply(st, loaded, dry_run=False, ask=loaded.deletes and not yes))
    _finish(ctx, policy, steps, fmt, dry_run, stop)


def _format(s: Settings, given: str | None) -> str:
    """The format asked for, checked against apply's own list in apply's words (settings.output_format
    names every command's list, without prometheus and with tsv)."""
    fmt = requested_output(s, given)
    if fmt not in APPLY_OUTPUTS:
        raise BadInput(f"invalid output format {fmt!r} for apply", hint=f"use {', '.join(APPLY_OUTPUTS)}")
    return str(fmt)


async def _apply(s: Settings, policy: Any, *, dry_run: bool, ask: bool) -> tuple[list[Any], int | None]:
    """Plan, show the plan, ask when rules delete, run; the steps and the signal that stopped it (or None)."""
    import uuid
    from datetime import UTC, datetime

    from sbdlq.cli.reporting import operation_note as _note
    from sbdlq.policy.plan import plan_policy
    from sbdlq.policy.runner import PolicyInterrupted, run_policy

    now = datetime.now(UTC)
    async with open_target(s) as backend:
        steps = await plan_policy(backend, policy, now=now, note=_note)
        for step in steps:
            note(f"sbdlq: plan: rule {step.rule.name!r} on {step.entity}: {step.will}")
        if ask and not dry_run:
            _confirm(steps)
        try:
            await run_policy(backend, steps, now=now, run_id=uuid.uuid4().hex[:8], dry_run=dry_run, note=_note)
        except PolicyInterrupted as stop:
            return steps, stop.signum
    return steps, None


def _confirm(steps: list[Any]) -> None:
    deleting = sum(s.rule.handler.deleting(s) for s in steps if s.rule.deletes)
    terminal.confirm(
        f"Run the policy? Its rules delete up to {deleting} message(s).",
        declined="apply cancelled; nothing was changed",
    )


def _finish(ctx: typer.Context, policy: str, steps: list[Any], fmt: str, dry_run: bool, stop: int | None) -> None:
    """Write the report, say what failed or fired on stderr, and exit with the run's status."""
    from sbdlq.policy.report import exit_status
    from sbdlq.policy.runner import FAILED, FIRED, INTERRUPTED

    status = exit_status(steps)
    _write(policy, steps, fmt, dry_run, status)
    for step in steps:
        if step.status == FIRED:
            err(step.rule.handler.fired(step))
    failed = [st for st in steps if st.status in (FAILED, INTERRUPTED)]
    if failed:
        err(f"sbdlq: {len(failed)} of {len(steps)} rule step(s) failed; the messages they left stay in their DLQ")
    if stop is not None:
        from sbdlq.cli.error_path import fail
        from sbdlq.operations.stopping import RunInterrupted

        fail(RunInterrupted(None, stop))
    if status is not ExitStatus.OK:
        raise typer.Exit(int(status))


def _write(policy: str, steps: list[Any], fmt: str, dry_run: bool, status: ExitStatus) -> None:
    from sbdlq.output.formats import write_document
    from sbdlq.policy.report import COLUMNS, detail, prometheus, step_json

    if FORMATS[fmt].metrics:
        if not dry_run:
            write_document(prometheus(policy, steps, status), fmt)
        return
    if FORMATS[fmt].for_people:
        from sbdlq.output.render import Col, table

        rows = [
            [st.rule.name, st.entity, st.rule.action, st.matched, st.status, detail(st, planned=dry_run)]
            for st in steps
        ]
        cols = [Col(c, whole=c in ("rule", "entity")) for c in COLUMNS]
        table(cols, rows, title=f"{policy}: {'plan (dry run)' if dry_run else 'applied'}")
        return
    write_document([step_json(st) for st in steps], fmt)  # `none` writes nothing


#: the top-level command of this module, by the name the user types
COMMANDS = {"apply": apply}


def register(parent: typer.Typer, name: str) -> None:
    """Add the command `name` of `COMMANDS` to `parent`."""
    parent.command(name)(COMMANDS[name])
