"""The commands that send copies: `resubmit` (of DLQ messages) and `replay` (of the records of a file).

Both take the copy options (`--new-message-id`, `--keep-dead-letter-properties`, the edit
options, `--allow-unverified-routing`) and send to a queue or topic `addresses.send_target` checks. `resubmit`
is bound to the DLQ and the transfer DLQ by cli/main.py, with the commands of dlq.py.
"""

from pathlib import Path
from typing import Annotated, Any

import typer

from sbdlq.addresses import SubQueue, resubmit_target, send_target
from sbdlq.cli import reporting
from sbdlq.cli.completion import complete_destination
from sbdlq.cli.edit_options import NO_EDITS, EditOptions, edit_options
from sbdlq.cli.error_path import guarded
from sbdlq.cli.notes import err
from sbdlq.cli.options import (
    NO_SELECTION,
    Entity,
    KeepDeadLetterProperties,
    NewMessageId,
    Output,
    QueryOpt,
    Rate,
    SelectionOptions,
    Spread,
    StartAt,
    count_option,
    dlq_address,
    selection_options,
    tuning,
    unverified_routing_option,
)
from sbdlq.cli.reporting import operation_note
from sbdlq.cli.settings import Settings, output_format
from sbdlq.cli.target import open_target
from sbdlq.errors import BadInput, ExitStatus
from sbdlq.output.render import Query

# ---------------------------------------------------------------------- resubmit

ResubmitFanOut = Annotated[
    bool,
    typer.Option(
        "--fan-out",
        help="From a subscription's DLQ: let the topic give copies to its other subscriptions too "
        "(refused without it).",
    ),
]
OnlyThisSubscription = Annotated[
    bool,
    typer.Option(
        "--only-this-subscription",
        help="From a subscription's DLQ: copies carry sbdlq-target and reach that subscription alone "
        "(needs `sbdlq routing enable-targeted TOPIC`).",
    ),
]


@selection_options
@edit_options
def resubmit(
    ctx: typer.Context,
    sub_queue: SubQueue,
    entity: Entity,
    to: Annotated[
        str | None,
        typer.Option(
            "--to", help="Send to this queue or topic instead of the entity.", autocompletion=complete_destination
        ),
    ] = None,
    concurrency: Annotated[int, count_option("--concurrency", "Messages in flight at most.")] = 32,
    batch_size: Annotated[int, count_option("--batch-size", "Messages received per batch.")] = 100,
    rate: Rate = None,
    spread: Spread = None,
    start_at: StartAt = None,
    max_count: Annotated[int | None, count_option("--max", "Resubmit at most N messages.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would move; change nothing.")] = False,
    new_message_id: NewMessageId = False,
    keep_dead_letter_properties: KeepDeadLetterProperties = False,
    allow_unverified_routing: Annotated[
        bool,
        unverified_routing_option(
            "Resubmit to a topic even when its subscriptions' rules cannot be read (copies no rule "
            "takes are then dropped by the broker)."
        ),
    ] = False,
    fan_out: ResubmitFanOut = False,
    only_this_subscription: OnlyThisSubscription = False,
    edits: EditOptions = NO_EDITS,
    selection: SelectionOptions = NO_SELECTION,
    output: Output = None,
    query: QueryOpt = None,
) -> None:
    """Send copies of DLQ messages back (send first, then complete the original)."""
    from sbdlq.operations.resubmit import resubmit as do_resubmit
    from sbdlq.operations.spread import spread_options
    from sbdlq.output.render import progress

    async def work(s: Settings) -> tuple[str, Any]:
        address = dlq_address(entity, sub_queue)
        target = resubmit_target(address, to)
        sel = selection.compile()
        copy_edits = edits.compile(keep_dead_letter_properties=keep_dead_letter_properties)
        fmt = output_format(s, output)
        async with open_target(s) as backend:
            with progress(f"resubmit {address}") as bars:
                result = await do_resubmit(
                    backend,
                    address,
                    target,
                    selection=sel,
                    max_count=max_count,
                    batch_size=tuning(ctx, s, "batch_size", batch_size),
                    concurrency=tuning(ctx, s, "concurrency", concurrency),
                    rate=rate,
                    dry_run=dry_run,
                    new_message_id=new_message_id,
                    keep_dead_letter_properties=keep_dead_letter_properties,
                    allow_unverified_routing=allow_unverified_routing,
                    edits=copy_edits,
                    fan_out=fan_out,
                    only_this_subscription=only_this_subscription,
                    spread=spread_options(spread, start_at),
                    note=operation_note,
                    progress=bars,
                )
        return fmt, result

    reporting.change(ctx, query, work, output)


#: Next to the input: `orders.jsonl` → `orders.jsonl.replay-state`.
STATE_SUFFIX = ".replay-state"


# ---------------------------------------------------------------------- replay

ReplayFanOut = Annotated[
    bool,
    typer.Option("--fan-out", help="To a topic: let a copy reach more than one subscription (refused without it)."),
]
OnlySubscription = Annotated[
    str | None,
    typer.Option(
        "--only-subscription",
        help="To a topic: copies carry sbdlq-target=SUB and reach that subscription alone "
        "(needs `sbdlq routing enable-targeted TOPIC`).",
        metavar="SUB",
    ),
]
IncludeHeldBack = Annotated[
    bool,
    typer.Option(
        "--include-held-back",
        help="Also send records a stopped purge --export never marked deleted (may still be in the DLQ).",
    ),
]


@selection_options
@edit_options
def replay(
    ctx: typer.Context,
    file: Annotated[
        str,
        typer.Argument(help="A purge --export or peek -o jsonl file; - reads stdin.", show_default=False),
    ],
    to: Annotated[
        str,
        typer.Option("--to", help="The queue or topic to send to.", autocompletion=complete_destination),
    ],
    concurrency: Annotated[int, count_option("--concurrency", "Records in flight at most.")] = 32,
    rate: Rate = None,
    spread: Spread = None,
    start_at: StartAt = None,
    max_count: Annotated[int | None, count_option("--max", "Replay at most N records.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check the file and show what would be sent.")] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Skip the lines an interrupted replay of this file already sent.")
    ] = False,
    state: Annotated[
        Path | None,
        typer.Option("--state", help="Where to record the lines sent (default: FILE.replay-state; stdin: none)."),
    ] = None,
    new_message_id: NewMessageId = False,
    keep_dead_letter_properties: KeepDeadLetterProperties = False,
    allow_unverified_routing: Annotated[
        bool, unverified_routing_option("Replay to a topic even when its subscriptions' rules cannot be read.")
    ] = False,
    fan_out: ReplayFanOut = False,
    only_subscription: OnlySubscription = None,
    include_held_back: IncludeHeldBack = False,
    edits: EditOptions = NO_EDITS,
    selection: SelectionOptions = NO_SELECTION,
    output: Output = None,
    query: QueryOpt = None,
) -> None:
    """Send the records of an export or peek file to a queue or topic (every line checked first)."""
    from sbdlq.operations.replay import ReplayOptions
    from sbdlq.operations.replay import replay as do_replay
    from sbdlq.operations.spread import spread_options
    from sbdlq.operations.stopping import RunInterrupted
    from sbdlq.output.render import progress

    q = reporting.query(ctx, query)
    source = None if file == "-" else Path(file)

    async def work(s: Settings) -> tuple[str, Any, RunInterrupted | None]:
        fmt = output_format(s, output)
        target = send_target(to)
        if source is not None and not source.is_file():
            raise BadInput(f"{file}: no such file")
        options = ReplayOptions(
            selection=selection.compile(),
            max_count=max_count,
            concurrency=concurrency,
            rate=rate,
            dry_run=dry_run,
            new_message_id=new_message_id,
            keep_dead_letter_properties=keep_dead_letter_properties,
            allow_unverified_routing=allow_unverified_routing,
            edits=edits.compile(keep_dead_letter_properties=keep_dead_letter_properties),
            fan_out=fan_out,
            target_subscription=only_subscription,
            state=state or (None if source is None else source.with_name(source.name + STATE_SUFFIX)),
            resume=resume,
            include_held_back=include_held_back,
            spread=spread_options(spread, start_at),
        )
        async with open_target(s) as backend:
            with progress(f"replay {file}") as bars:
                try:
                    result = await do_replay(backend, source, target, options, note=operation_note, progress=bars)
                    return fmt, result, None
                except RunInterrupted as stop:
                    return fmt, stop.result, stop

    _finish(*guarded(ctx, work), q)


def _finish(fmt: str, result: Any, stop: Any, q: Query | None) -> None:
    """Report; then exit 130/143 when stopped, or 1 with one line on stderr when records were not sent."""
    reporting.report(fmt, result.to_json(), result.summary(), q)
    if stop is not None:
        from sbdlq.cli.error_path import fail

        fail(stop)
    line = result.left_over()
    if line is not None:
        err(f"sbdlq: {line}")
        raise typer.Exit(int(ExitStatus.FAILED))


#: the top-level commands of this module, by the name the user types
COMMANDS = {"resubmit": resubmit, "replay": replay}
#: those of them that read a sub-queue: bound to the DLQ and, under `transfer-dlq`, to the
#: transfer DLQ (`replay` reads a file, never a sub-queue)
READS_SUB_QUEUE = frozenset({"resubmit"})


def register(parent: typer.Typer, name: str, sub_queue: SubQueue = SubQueue.DEAD_LETTER) -> None:
    """Add the command `name` of `COMMANDS` to `parent`; one that reads a sub-queue reads `sub_queue`."""
    from sbdlq.cli.options import for_sub_queue

    command = COMMANDS[name]
    parent.command(name)(for_sub_queue(command, sub_queue) if name in READS_SUB_QUEUE else command)
