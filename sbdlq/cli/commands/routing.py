"""`sbdlq routing`: targeted routing on a topic (status, enable-targeted, disable-targeted).

The logic and the order of the rule changes are `operations/targeted.py`'s; this parses,
shows the plan, asks, and reports.
"""

from typing import Annotated, Any

import typer

from sbdlq import terminal
from sbdlq.addresses import EntityPath, parse_entity
from sbdlq.cli.error_path import guarded
from sbdlq.cli.notes import err, note
from sbdlq.cli.options import Output, Yes
from sbdlq.cli.settings import Settings, output_format
from sbdlq.cli.target import open_target
from sbdlq.errors import BadInput

app = typer.Typer(
    name="routing",
    help="Targeted routing: let a resubmit reach one subscription of a topic (sbdlq-target).",
    no_args_is_help=True,
)

Topic = Annotated[str, typer.Argument(help="The topic.", show_default=False)]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Show the rule changes; change nothing.")]


def _topic(text: str) -> EntityPath:
    topic = parse_entity(text)
    if topic.is_subscription:
        raise BadInput(f"{text!r} is a subscription; name its topic")
    return topic


@app.command("status")
def status_cmd(ctx: typer.Context, topic: Topic, output: Output = None) -> None:
    """Whether targeted routing is enabled, disabled or half done, subscription by subscription."""
    from sbdlq.operations.lease import leases_in, now_utc
    from sbdlq.operations.targeted import read_rules, topic_state

    async def work(s: Settings) -> tuple[str, Any, list[Any]]:
        fmt = output_format(s, output)
        path = _topic(topic)
        async with open_target(s) as backend:
            rules = await read_rules(backend, path)
            return fmt, topic_state(path, rules), leases_in(rules)

    fmt, state, leases = guarded(ctx, work)
    doc = state.to_json()
    now = now_utc()
    doc["leases"] = [{**x.to_json(), "live": x.live(now)} for x in leases]
    if fmt != "table":
        from sbdlq.output.formats import write_document

        write_document(doc, fmt)
        return
    from sbdlq.output.render import auto_table

    typer.echo(f"topic {state.topic}: targeted routing {state.state}")
    if doc["subscriptions"]:
        auto_table(doc["subscriptions"])
    for x in leases:
        typer.echo(f"lease: {x.line()} ({'live' if x.live(now) else 'expired'})")
    if state.state == "partial":
        err(f"sbdlq: half done: rerun `sbdlq routing enable-targeted {state.topic}` (or disable-targeted) to finish")


AcceptCase = Annotated[
    bool,
    typer.Option(
        "--accept-case-insensitive-names",
        help="Let a correlation filter's application property names match in any case once it is "
        "rewritten as SQL (a correlation filter matches the exact case only); the plan lists each rule.",
    ),
]


@app.command("enable-targeted")
def enable_cmd(
    ctx: typer.Context, topic: Topic, yes: Yes = False, dry_run: DryRun = False, accept_case: AcceptCase = False
) -> None:
    """Rewrite the subscriptions' rules so a message with sbdlq-target goes only to the one it names."""
    _change(ctx, topic, enable=True, yes=yes, dry_run=dry_run, accept_case=accept_case)


Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Take over the leases of targeted runs (a run whose holder died); a run still alive stops "
        "before its next chunk and reports the copies that may have reached other subscriptions.",
    ),
]


Wait = Annotated[
    str | None,
    typer.Option(
        "--wait",
        metavar="DURATION",
        help="While a targeted run holds a lease, wait up to this long (30s, 10m) for it to end, "
        "reading the leases again every 2 s; still held then: refused as without it.",
        show_default=False,
    ),
]


@app.command("disable-targeted")
def disable_cmd(
    ctx: typer.Context,
    topic: Topic,
    yes: Yes = False,
    dry_run: DryRun = False,
    force: Force = False,
    wait: Wait = None,
) -> None:
    """Restore the original rules exactly and remove the sbdlq-target rules (not while a targeted run holds a lease)."""
    _change(ctx, topic, enable=False, yes=yes, dry_run=dry_run, force=force, wait=wait)


def _change(
    ctx: typer.Context,
    topic: str,
    *,
    enable: bool,
    yes: bool,
    dry_run: bool,
    accept_case: bool = False,
    force: bool = False,
    wait: str | None = None,
) -> None:
    from sbdlq.operations.lease import now_utc
    from sbdlq.operations.targeted import (
        RoutingPlan,
        Step,
        apply_steps,
        disable_leased,
        disable_plan,
        enable_steps,
        read_rules,
        wait_for_leases,
    )

    verb = "enable" if enable else "disable"

    async def work(s: Settings) -> str:
        path = _topic(topic)
        async with open_target(s) as backend:
            wait_s = _wait_s(wait, force=force)
            if wait_s is None:
                subscriptions = await read_rules(backend, path)
            else:
                subscriptions = await wait_for_leases(backend, path, wait_s, note=note)
            if enable:
                plan = RoutingPlan(enable_steps(subscriptions, accept_case_insensitive_names=accept_case))
            else:
                plan = disable_plan(path, subscriptions, now_utc(), force=force)
            steps = plan.steps
            if not steps and not plan.leases:
                return f"targeted routing is already {verb}d on topic {path}: nothing to change"
            typer.echo(f"plan: {len(steps)} rule change(s) on topic {path}:")
            for line in [*plan.lines(), *(step.line() for step in steps)]:
                typer.echo(f"  {line}")
            if dry_run:
                return "dry run: nothing changed"
            _confirm(yes, f"{verb.capitalize()} targeted routing on topic {path} ({len(steps)} change(s))?")

            def done(step: Step) -> None:
                err(f"sbdlq: done: {step.line()}")

            if enable:
                await apply_steps(backend, path, steps, done=done)
            else:
                await disable_leased(backend, path, plan, force=force, done=done)
        kept = (
            "; each rewritten rule keeps its original in its filter: "
            f"`sbdlq routing disable-targeted {path}` restores them"
            if enable
            else ""
        )
        return f"targeted routing {verb}d on topic {path}: {len(steps)} rule change(s){kept}"

    typer.echo(guarded(ctx, work))


def _wait_s(wait: str | None, *, force: bool) -> float | None:
    """--wait in seconds (None: not given)."""
    if wait is None:
        return None
    from sbdlq.timeparse import parse_duration

    if force:
        raise BadInput("--wait and --force contradict each other: choose one")
    return parse_duration(wait, what="--wait")


def _confirm(yes: bool, question: str) -> None:
    if terminal.must_ask(yes, BadInput("this changes the topic's rules: add --yes (stdin is not a terminal)")):
        terminal.confirm(question, declined="cancelled; nothing was changed")


#: the top-level group of this module, by the name the user types
COMMANDS = {"routing": app}


def register(parent: typer.Typer, name: str) -> None:
    """Add the group `name` of `COMMANDS` to `parent`."""
    parent.add_typer(COMMANDS[name], name=name)
