"""`sbdlq replay FILE.jsonl --to ENTITY`: send the records of an export or peek file again."""

from pathlib import Path
from typing import Annotated, Any

import typer

from sbdlq.cli.common import Settings, err, open_target, output_format, run
from sbdlq.cli.complete import complete_destination
from sbdlq.cli.dlq import _note, _query, _report, send_to
from sbdlq.cli.edit_options import NO_EDITS, EditOptions, edit_options
from sbdlq.cli.options import (
    KeepDeadLetterProperties,
    NewMessageId,
    Output,
    QueryOpt,
    Rate,
    SelectionOptions,
    count_option,
    selection_options,
    unverified_routing_option,
)
from sbdlq.errors import BadInput, ExitStatus
from sbdlq.render import Query

NO_SELECTION = SelectionOptions()
#: Next to the input: `orders.jsonl` → `orders.jsonl.replay-state`.
STATE_SUFFIX = ".replay-state"


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
    edits: EditOptions = NO_EDITS,
    selection: SelectionOptions = NO_SELECTION,
    output: Output = None,
    query: QueryOpt = None,
) -> None:
    """Send the records of an export or peek file to a queue or topic (every line checked first)."""
    from sbdlq.operations.replay import ReplayOptions
    from sbdlq.operations.replay import replay as do_replay
    from sbdlq.operations.stopping import RunInterrupted
    from sbdlq.render import progress

    q = _query(ctx, query)
    source = None if file == "-" else Path(file)

    async def work(s: Settings) -> tuple[str, Any, RunInterrupted | None]:
        fmt = output_format(s, output)
        target = send_to(to)
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
            state=state or (None if source is None else source.with_name(source.name + STATE_SUFFIX)),
            resume=resume,
        )
        async with open_target(s) as backend:
            with progress(f"replay {file}") as bars:
                try:
                    return fmt, await do_replay(backend, source, target, options, note=_note, progress=bars), None
                except RunInterrupted as stop:
                    return fmt, stop.result, stop

    _finish(*run(ctx, work), q)


def _finish(fmt: str, result: Any, stop: Any, q: Query | None) -> None:
    """Report; then exit 130/143 when stopped, or 1 with one line on stderr when records were not sent."""
    _report(fmt, result.to_json(), result.summary(), q)
    if stop is not None:
        from sbdlq.cli.common import fail

        fail(stop)
    if result.dry_run or not (result.failed or result.unroutable):
        return
    cause = f"{result.errors[0]}; " if result.errors else ""
    left = result.failed + result.unroutable
    err(f"sbdlq: {cause}{left} record(s) were not replayed; fix the cause and rerun with --resume to send only those")
    raise typer.Exit(int(ExitStatus.FAILED))
