"""The DLQ commands that read or delete: count, peek, inspect-reason, purge.

Each command is written once, at module level, for any sub-queue; cli/main.py binds them (and
`resubmit`, written in copies.py next to `replay`, whose copy options it shares) to the
dead-letter queue on the root app and to the transfer dead-letter queue on `transfer-dlq`.
Every command has one shape: open the target, call the operation, map errors, render; what
they print in common is cli/reporting.py's and sbdlq/output's.
"""

from pathlib import Path
from typing import Annotated, Any

import typer

from sbdlq import terminal
from sbdlq.addresses import Address, SubQueue, parse_entity
from sbdlq.cli import reporting
from sbdlq.cli.completion import complete_count_output, complete_entity, complete_group_by
from sbdlq.cli.error_path import guarded
from sbdlq.cli.notes import note
from sbdlq.cli.options import (
    NO_SELECTION,
    Entity,
    Output,
    QueryOpt,
    SelectionOptions,
    Yes,
    count_option,
    dlq_address,
    output_option,
    selection_options,
    tuning,
)
from sbdlq.cli.reporting import operation_note, queue_name
from sbdlq.cli.settings import Settings, output_format
from sbdlq.cli.target import open_target
from sbdlq.errors import BadInput
from sbdlq.output import report_tables
from sbdlq.output.formats import Emitter, draws_table, offer_help
from sbdlq.selection import MAX_SEQUENCE, Selection


def fail_above_option(sub_queue: SubQueue) -> Any:
    """--fail-above, its help naming the queue it watches (cli/main.py binds it per sub-queue)."""
    help_ = f"Exit 3 when a {queue_name(sub_queue)} holds more than N."
    return Annotated[int | None, typer.Option("--fail-above", help=help_, min=0, metavar="N")]


# ---------------------------------------------------------------------- count


CountOutput = Annotated[
    str | None,
    output_option(offer_help("count"), complete_count_output),
]
WatchOpt = Annotated[
    str | None,
    typer.Option(
        "--watch",
        help="Count again every DURATION (5s) until Ctrl-C: redrawn on a terminal, one snapshot per interval off one.",
        metavar="DURATION",
    ),
]


def count(
    ctx: typer.Context,
    sub_queue: SubQueue,
    entities: Annotated[
        list[str] | None,
        typer.Argument(
            help="Queues or subscriptions; none: every one.", show_default=False, autocompletion=complete_entity
        ),
    ] = None,
    fail_above: Annotated[int | None, typer.Option("--fail-above", min=0)] = None,  # help: fail_above_option
    watch: WatchOpt = None,
    output: CountOutput = None,
    query: QueryOpt = None,
) -> None:
    """Count active, dead-letter, transfer dead-letter and scheduled messages."""
    q = reporting.query(ctx, query)
    from sbdlq.cli.count_views import check_threshold, count_format, show_counts, watch_counts
    from sbdlq.operations.browse import count_entities

    if watch is not None:
        watch_counts(ctx, sub_queue, entities or [], every=watch, fail_above=fail_above, output=output, q=q)
        return

    async def work(s: Settings) -> list[Any]:
        fmt = count_format(s, output, q)
        paths = [parse_entity(e) for e in entities or []]
        async with open_target(s) as backend:
            return [fmt, await count_entities(backend, paths or None, note=operation_note)]

    fmt, counts = guarded(ctx, work, reads_only=True)
    show_counts(counts, fmt, q)
    reporting.warn_if_query_found_nothing(q, fmt)
    if fail_above is not None:
        check_threshold(ctx, counts, sub_queue, fail_above)


# ---------------------------------------------------------------------- peek

#: how many messages `peek` shows in a table when --max is not given (other formats: every one)
TABLE_PEEK_MAX = 20
#: rows of a `peek` table printed at a time (all at the first page's widths): its memory bound
TABLE_PAGE_ROWS = 1000


@selection_options
def peek(
    ctx: typer.Context,
    sub_queue: SubQueue,
    entity: Entity,
    max_count: Annotated[
        int | None,
        count_option("--max", f"Show at most N messages (default: {TABLE_PEEK_MAX} in a table, all in other formats)."),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every message (overrides --max).")] = False,
    from_sequence: Annotated[
        int,
        typer.Option("--from-sequence", help="Start at this sequence number.", min=0, max=MAX_SEQUENCE, metavar="N"),
    ] = 0,
    selection: SelectionOptions = NO_SELECTION,
    output: Output = None,
    query: QueryOpt = None,
) -> None:
    """Browse the queue without locking or changing anything."""
    q = reporting.query(ctx, query)

    async def work(s: Settings) -> str:
        address = dlq_address(entity, sub_queue)
        sel = selection.compile()
        fmt = output_format(s, output)
        table = draws_table(fmt, q)
        # A script never gets a silently cut list: only a table (for a person) stops at a default.
        limit = None if all_ else max_count if max_count is not None or not table else TABLE_PEEK_MAX
        async with open_target(s) as backend:
            await backend.get_entity(address.entity)
            if table:
                await _peek_to_table(backend, address, sel, from_sequence, limit)
            else:
                from sbdlq.output.message_table import PEEK_COLUMNS, tsv_keys

                emitter = Emitter(fmt, query=q, columns=tsv_keys(PEEK_COLUMNS))
                await _peek_to_document(backend, address, sel, from_sequence, limit, emitter)
        return fmt

    reporting.warn_if_query_found_nothing(q, guarded(ctx, work, reads_only=True))


async def _peek_to_table(backend: Any, address: Address, sel: Selection, from_sequence: int, limit: int | None) -> None:
    """A table of the first `limit` messages, and a note pointing at the rest."""
    from sbdlq.nearest import PassedOver
    from sbdlq.operations.browse import iter_messages
    from sbdlq.output.message_table import PEEK_COLUMNS, table_columns
    from sbdlq.output.render import PagedTable

    # Rows, not messages, and a page of them at a time: `--all` over a million messages
    # holds one page of rows, never the bodies.
    shown = PagedTable(table_columns(PEEK_COLUMNS), lambda n: _peek_title(str(address), n), TABLE_PAGE_ROWS)
    count = last_sequence = 0
    passed = PassedOver(sel)
    # One more than shown tells whether to point at the rest.
    async for m in iter_messages(
        backend,
        address,
        selection=sel,
        from_sequence=from_sequence,
        limit=None if limit is None else limit + 1,
        on_passed=passed,
    ):
        if limit is not None and count == limit:
            break
        shown.add(_peek_row(m))
        count += 1
        last_sequence = m.sequence_number
    else:
        limit = None  # no more than shown
    shown.close()
    if not count:
        reporting.warn_nearest(passed)
    if limit is not None:
        note(f"sbdlq: showing the first {limit}; see more with --from-sequence {last_sequence + 1}, --max N or --all")


async def _peek_to_document(
    backend: Any, address: Address, sel: Selection, from_sequence: int, limit: int | None, emitter: Emitter
) -> None:
    """Every message as it arrives, as one json/yaml document or one jsonl line each."""
    from sbdlq.nearest import PassedOver
    from sbdlq.operations.browse import iter_messages
    from sbdlq.output.render import progress

    passed = PassedOver(sel)
    shown = 0
    emitter.begin()
    try:
        # No bar when stdout is the same terminal: it would tear the output.
        with progress(f"peek {address}", enabled=not terminal.stdout_is_terminal()) as bars:
            tick = bars(None) if limit is None else None
            async for m in iter_messages(
                backend,
                address,
                selection=sel,
                from_sequence=from_sequence,
                limit=limit,
                on_page=tick,
                on_passed=passed,
            ):
                emitter.item(m.to_json())
                shown += 1
    finally:
        # Close the document even when interrupted: stdout stays valid JSON
        # and the exit status says the list is incomplete.
        emitter.end()
    if not shown:
        reporting.warn_nearest(passed)


# ---------------------------------------------------------------------- inspect-reason


ByOpt = Annotated[
    str,
    typer.Option(
        "--by",
        help="reason, description, fingerprint (the description with its numbers, ids and times masked), "
        "source, subject, property:NAME, hour, day or entity.",
        autocompletion=complete_group_by,
    ),
]
NamespaceEntity = Annotated[
    str | None,
    typer.Argument(
        help="Queue, or TOPIC/Subscriptions/SUB; none: every one of the namespace.",
        show_default=False,
        autocompletion=complete_entity,
    ),
]


@selection_options
def inspect_reason(
    ctx: typer.Context,
    sub_queue: SubQueue,
    entity: NamespaceEntity = None,
    by: ByOpt = "reason",
    selection: SelectionOptions = NO_SELECTION,
    output: Output = None,
    query: QueryOpt = None,
) -> None:
    """Group messages by why they failed: count, first and last enqueued, samples."""
    q = reporting.query(ctx, query)
    if entity is None:
        from sbdlq.cli.namespace_inspect import inspect_namespace

        inspect_namespace(ctx, sub_queue, by=by, selection=selection, output=output, q=q)
        return
    from sbdlq.nearest import PassedOver
    from sbdlq.operations.browse import group_key, inspect_reasons
    from sbdlq.output.render import progress

    async def work(s: Settings) -> tuple[str, list[Any]]:
        address = dlq_address(entity, sub_queue)
        group_key(by)  # reject a bad --by before any I/O
        sel = selection.compile()
        fmt = reporting.group_output(s, output)
        passed = PassedOver(sel)
        async with open_target(s) as backend:
            await backend.get_entity(address.entity)
            with progress(f"scan {address}") as bars:
                groups = await inspect_reasons(
                    backend, address, by=by, selection=sel, on_page=bars(None), on_passed=passed
                )
        if not groups:
            reporting.warn_nearest(passed)
        return fmt, groups

    fmt, groups = guarded(ctx, work, reads_only=True)
    if not draws_table(fmt, q):
        report_tables.write([g.to_json() for g in groups], fmt, q)
        return
    _reasons_table(groups, by)
    if reporting.chart_wanted() and groups:
        _reasons_chart(groups, by)


def _reasons_table(groups: list[Any], by: str) -> None:
    from sbdlq.operations.browse import is_fingerprint_grouping
    from sbdlq.output.render import Col, table

    if is_fingerprint_grouping(by):
        table(
            [*report_tables.fingerprint_columns(), *report_tables.group_stat_columns()],
            [(g.key, g.reason, g.template, *report_tables.group_stats(g)) for g in groups],
            title=f"{sum(g.count for g in groups)} message(s) in {len(groups)} fingerprint(s)",
        )
        return
    table(
        # The key (a reason, a description, ...) is what the operator came for: never cut.
        [Col("key", whole=True, min_width=12), *report_tables.group_stat_columns()],
        [(g.key, *report_tables.group_stats(g)) for g in groups],
        title=f"{sum(g.count for g in groups)} message(s) by {by}",
    )


def _reasons_chart(groups: list[Any], by: str) -> None:
    from sbdlq.operations.browse import timeline
    from sbdlq.output.render import bar_chart

    if by in ("hour", "day"):
        bar_chart(timeline(groups, by), title=f"messages per {by} (UTC)")
    else:
        bar_chart([(g.key, g.count) for g in groups], title=f"messages by {by}")


# ---------------------------------------------------------------------- purge


@selection_options
def purge(
    ctx: typer.Context,
    sub_queue: SubQueue,
    entity: Entity,
    max_count: Annotated[int | None, count_option("--max", "Delete at most N messages.")] = None,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="Append each message to this JSONL file (synced) before deleting it, and mark it deleted "
            "after; a stopped run leaves at most --batch-size unmarked (replay holds those back).",
        ),
    ] = None,
    export_follow_symlinks: Annotated[
        bool, typer.Option("--export-follow-symlinks", help="Let --export write through a symlink.")
    ] = False,
    batch_size: Annotated[
        int, count_option("--batch-size", "Messages per batch (--export: written, then deleted, a batch at a time).")
    ] = 500,
    concurrency: Annotated[
        int,
        count_option(
            "--concurrency", "Batch deletes (or messages) in flight at most (--export: one batch, --batch-size)."
        ),
    ] = 32,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be deleted; change nothing.")] = False,
    yes: Yes = False,
    selection: SelectionOptions = NO_SELECTION,
    output: Output = None,
    query: QueryOpt = None,
) -> None:
    """Delete DLQ messages, optionally exporting each one first."""
    from sbdlq.operations.purge import purge as do_purge
    from sbdlq.output.render import progress

    async def work(s: Settings) -> tuple[str, Any]:
        address = dlq_address(entity, sub_queue)
        sel = selection.compile()
        fmt = output_format(s, output)
        if export is not None:
            _check_export_path(export)
        if not dry_run:
            refusal = BadInput("purge needs --yes when stdin is not a terminal", hint="or try --dry-run first")
            terminal.must_ask(yes, refusal)
        async with open_target(s) as backend:
            # No bar when a prompt will come: Rich would redraw over the question.
            with progress(f"purge {address}", enabled=yes or dry_run) as bars:
                result = await do_purge(
                    backend,
                    address,
                    selection=sel,
                    max_count=max_count,
                    export=export,
                    export_follow_symlinks=export_follow_symlinks,
                    batch_size=tuning(ctx, s, "batch_size", batch_size),
                    concurrency=tuning(ctx, s, "concurrency", concurrency),
                    dry_run=dry_run,
                    note=operation_note,
                    progress=bars,
                    confirm=None if yes else lambda n: _confirm(address, n, export),
                )
        return fmt, result

    reporting.change(ctx, query, work, output)


# ---------------------------------------------------------------------- helpers


def _check_export_path(path: Path) -> None:
    parent = path.expanduser().resolve().parent
    if path.is_dir():
        raise BadInput(f"--export {path}: is a directory")
    if not parent.is_dir():
        raise BadInput(f"--export {path}: directory {parent} does not exist")
    import os

    if (path.exists() and not os.access(path, os.W_OK)) or (not path.exists() and not os.access(parent, os.W_OK)):
        raise BadInput(f"--export {path}: not writable")


def _confirm(address: Address, n: int, export: Path | None) -> None:
    """Ask on the terminal, with the number the plan found."""
    what = f"Export to {export} and delete" if export else "Delete"
    terminal.confirm(f"{what} {n} message(s) from {address}?", declined="purge cancelled; nothing was deleted")


def _peek_row(m: Any) -> tuple[Any, ...]:
    """A message as a peek table row: its body shortened, or its size when large or binary."""
    from sbdlq.models import body_text
    from sbdlq.operations.sizing import LARGE_BODY_BYTES
    from sbdlq.output.message_table import PEEK_COLUMNS, table_row
    from sbdlq.output.render import human_size

    if len(m.body) >= LARGE_BODY_BYTES:
        body = f"<{human_size(len(m.body))}>"
    else:
        text, enc = body_text(m.body)
        # Enough of the body for any width; the layout shortens it visibly to fit.
        body = text[:200] if enc == "utf-8" else f"<{len(m.body)} bytes>"
    return table_row(PEEK_COLUMNS, m, body)


def _peek_title(address: str, n: int | None) -> str:
    return address if n is None else f"{address}: {n} message(s)"


#: the top-level commands of this module, by the name the user types: the DLQ commands that
#: read a sub-queue (each bound to the DLQ and, under `transfer-dlq`, to the transfer DLQ)
COMMANDS = {"count": count, "peek": peek, "inspect-reason": inspect_reason, "purge": purge}


def register(parent: typer.Typer, name: str, sub_queue: SubQueue = SubQueue.DEAD_LETTER) -> None:
    """Add the command `name` of `COMMANDS` to `parent`, reading `sub_queue`."""
    from sbdlq.cli.options import for_sub_queue

    callback = COMMANDS[name]
    options = {"fail_above": fail_above_option(sub_queue)} if name == "count" else None
    parent.command(name)(for_sub_queue(callback, sub_queue, options=options))
