"""`sbdlq spread`: the spreads `resubmit --spread` started on this machine (list, status, cancel).

The records are `operations/spread_file.py`'s, the broker reads `operations/spread_ops.py`'s;
this parses, calls and reports.
"""

from pathlib import Path
from typing import Annotated, Any

import typer

from sbdlq.cli import reporting
from sbdlq.cli.completion import complete_destination
from sbdlq.cli.error_path import guarded
from sbdlq.cli.notes import err
from sbdlq.cli.options import Output, QueryOpt
from sbdlq.cli.settings import Settings, output_format
from sbdlq.cli.target import open_target
from sbdlq.errors import ExitStatus
from sbdlq.output import report_tables
from sbdlq.output.formats import draws_table

app = typer.Typer(
    name="spread",
    help="Spreads started by resubmit --spread: list them, see where their copies are, cancel the rest.",
    no_args_is_help=True,
)

SpreadId = Annotated[str, typer.Argument(help="The spread id (`sbdlq spread list`).", show_default=False)]

#: `spread list` columns, in order (its JSON records hold these keys and `file`).
LIST_COLUMNS = ["id", "source", "target", "start", "end", "copies", "finished"]


@app.command("list")
def list_cmd(ctx: typer.Context, output: Output = None, query: QueryOpt = None) -> None:
    """The spreads this machine started, oldest first (from the state dir; no broker call)."""
    from sbdlq.operations.spread_file import list_spreads, spread_path

    q = reporting.query(ctx, query)

    async def work(s: Settings) -> tuple[str, Any]:
        return output_format(s, output), list_spreads()

    fmt, docs = guarded(ctx, work)
    rows = [
        {
            "id": d.id,
            "source": d.header.get("source"),
            "target": d.target,
            "start": d.header.get("start"),
            "end": d.header.get("end"),
            "copies": len(d.copies),
            "finished": d.finished is not None,
            "file": str(spread_path(d.id)),
        }
        for d in docs
    ]
    report_tables.emit_list(rows, fmt, LIST_COLUMNS, q)


@app.command("status")
def status_cmd(ctx: typer.Context, spread_id: SpreadId, output: Output = None, query: QueryOpt = None) -> None:
    """How many copies are still scheduled, how many became active, and the next release time."""
    from sbdlq.operations.spread_file import read_spread
    from sbdlq.operations.spread_ops import spread_status

    q = reporting.query(ctx, query)

    async def work(s: Settings) -> tuple[str, Any]:
        fmt = output_format(s, output)
        doc = read_spread(spread_id)
        async with open_target(s) as backend:
            return fmt, await spread_status(backend, doc)

    fmt, status = guarded(ctx, work)
    doc = status.to_json()
    if draws_table(fmt, q):
        from sbdlq.output.render import table

        shown = [key for key in doc if key not in status.NOT_IN_TABLE]
        table(["field", "value"], [[key, "-" if doc[key] is None else doc[key]] for key in shown])
        if not status.checked:
            err(
                f"sbdlq: note: topic {status.target}'s scheduled messages cannot be read: "
                "counted from the record's times"
            )
    else:
        report_tables.write(doc, fmt, q)


@app.command("cancel")
def cancel_cmd(
    ctx: typer.Context,
    spread_id: SpreadId,
    export: Annotated[
        Path | None,
        typer.Option("--export", help="Write each scheduled copy to this JSONL file (synced) before cancelling it."),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Send each scheduled copy to this queue or topic before cancelling it.",
            autocompletion=complete_destination,
        ),
    ] = None,
    output: Output = None,
    query: QueryOpt = None,
) -> None:
    """Cancel the copies still scheduled, each first put in the export file or sent --to an entity."""
    from sbdlq.operations.spread_file import read_spread
    from sbdlq.operations.spread_ops import Place, cancel_spread
    from sbdlq.operations.stopping import RunInterrupted
    from sbdlq.output.render import progress

    q = reporting.query(ctx, query)

    async def work(s: Settings) -> tuple[str, Any, RunInterrupted | None]:
        fmt = output_format(s, output)
        doc = read_spread(spread_id)
        async with open_target(s) as backend:
            place = Place(backend, export, to)
            try:
                with progress(f"cancel spread {spread_id}") as bars:
                    tick = bars(len(doc.copies) - len(doc.cancelled))
                    return fmt, await cancel_spread(backend, doc, place, tick=tick), None
            except RunInterrupted as stop:
                return fmt, stop.result, stop
            finally:
                place.close()

    fmt, result, stop = guarded(ctx, work)
    reporting.report(fmt, result.to_json(), result.summary(), q)
    if stop is not None:
        from sbdlq.cli.error_path import fail

        fail(stop)
    if result.also_active:
        err(
            f"sbdlq: {len(result.also_active)} copies fell due before their cancel: they are active and also "
            f"{result.place} (sequence numbers {', '.join(map(str, result.also_active[:10]))})"
        )
        raise typer.Exit(int(ExitStatus.FAILED))


#: the top-level group of this module, by the name the user types
COMMANDS = {"spread": app}


def register(parent: typer.Typer, name: str) -> None:
    """Add the group `name` of `COMMANDS` to `parent`."""
    parent.add_typer(COMMANDS[name], name=name)
