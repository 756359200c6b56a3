"""The DLQ commands: count, peek, inspect-reason, resubmit, purge.

Each command is written once, at module level, for any sub-queue; `register` binds them to
the dead-letter queue on the root app and to the transfer dead-letter queue on `transfer-dlq`.
`resubmit` is written in copy_cmds.py, next to `replay`, whose copy options it shares.
Every command has one shape: open the target, call the operation, map errors, render.
"""

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sbdlq.cli.common import Settings, err, handled, note, open_target, output_format, run
from sbdlq.cli.complete import complete_count_output, complete_entity, complete_group_by
from sbdlq.cli.options import (
    Entity,
    Output,
    QueryOpt,
    SelectionOptions,
    Yes,
    count_option,
    for_sub_queue,
    output_option,
    selection_options,
)
from sbdlq.errors import BadInput, ExitStatus, OperationFailed, ThresholdExceeded
from sbdlq.paths import Address, SubQueue, parse_entity
from sbdlq.render import Emitter, Query
from sbdlq.selection import MAX_SEQUENCE, Selection

if TYPE_CHECKING:
    from sbdlq.models import RunResult

NO_SELECTION = SelectionOptions()
# `peek -o tsv`: the peek table's columns, as Message JSON keys, with full values.
PEEK_TSV_KEYS = (
    "sequence_number",
    "enqueued_time",
    "delivery_count",
    "dead_letter_reason",
    "dead_letter_error_description",
    "subject",
    "message_id",
    "body",
)


def register(app: typer.Typer, sub_queue: SubQueue) -> None:
    """Define the five DLQ commands on `app`, reading `sub_queue`."""
    from sbdlq.cli.copy_cmds import resubmit

    app.command("count")(for_sub_queue(count, sub_queue, options={"fail_above": _fail_above_option(sub_queue)}))
    app.command("peek")(for_sub_queue(peek, sub_queue))
    app.command("inspect-reason")(for_sub_queue(inspect_reason, sub_queue))
    app.command("resubmit")(for_sub_queue(resubmit, sub_queue))
    app.command("purge")(for_sub_queue(purge, sub_queue))


def _address(entity: str, sub_queue: SubQueue) -> Address:
    return Address(parse_entity(entity), sub_queue)


def _queue_name(sub_queue: SubQueue) -> str:
    return "transfer dead-letter queue" if sub_queue is SubQueue.TRANSFER_DEAD_LETTER else "dead-letter queue"


def _fail_above_option(sub_queue: SubQueue) -> Any:
    """--fail-above, its help naming the queue it watches."""
    help_ = f"Exit 3 when a {_queue_name(sub_queue)} holds more than N."
    return Annotated[int | None, typer.Option("--fail-above", help=help_, min=0, metavar="N")]


# ---------------------------------------------------------------------- count


CountOutput = Annotated[
    str | None,
    output_option(
        "table, json, jsonl, yaml, tsv, or prometheus (gauges for node_exporter's textfile collector).",
        complete_count_output,
    ),
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
    fail_above: Annotated[int | None, typer.Option("--fail-above", min=0)] = None,  # help: _fail_above_option
    watch: WatchOpt = None,
    output: CountOutput = None,
    query: QueryOpt = None,
) -> None:
    """Count active, dead-letter, transfer dead-letter and scheduled messages."""
    q = _query(ctx, query)
    from sbdlq.cli.count_views import count_format, show_counts, watch_counts
    from sbdlq.operations.browse import count_entities

    if watch is not None:
        watch_counts(ctx, sub_queue, entities or [], every=watch, fail_above=fail_above, output=output, q=q)
        return

    async def work(s: Settings) -> list[Any]:
        fmt = count_format(s, output, q)
        paths = [parse_entity(e) for e in entities or []]
        async with open_target(s) as backend:
            return [fmt, await count_entities(backend, paths or None, note=_note)]

    fmt, counts = run(ctx, work, reads_only=True)
    show_counts(counts, fmt, q)
    _warn_if_query_found_nothing(q, fmt)
    if fail_above is not None:
        _check_threshold(ctx, counts, sub_queue, fail_above)


def _check_threshold(ctx: typer.Context, counts: list[Any], sub_queue: SubQueue, fail_above: int) -> None:
    """Exit 3 naming the fullest queue when any holds more than `fail_above` messages."""
    from sbdlq.operations.browse import dlq_count

    over = [c for c in counts if dlq_count(c, sub_queue) > fail_above]
    if over:
        worst = max(over, key=lambda c: dlq_count(c, sub_queue))
        with handled(ctx):
            raise ThresholdExceeded(
                f"{worst.entity}: {dlq_count(worst, sub_queue)} messages in the {_queue_name(sub_queue)}, "
                f"above {fail_above}" + (f" ({len(over)} entities over)" if len(over) > 1 else "")
            )


# ---------------------------------------------------------------------- peek

#: how many messages `peek` shows in a table when --max is not given (other formats: every one)
TABLE_PEEK_MAX = 20


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
    q = _query(ctx, query)

    async def work(s: Settings) -> str:
        address = _address(entity, sub_queue)
        sel = selection.compile()
        fmt = output_format(s, output)
        table = fmt == "table" and q is None
        # A script never gets a silently cut list: only a table (for a person) stops at a default.
        limit = None if all_ else max_count if max_count is not None or not table else TABLE_PEEK_MAX
        async with open_target(s) as backend:
            await backend.get_entity(address.entity)
            if table:
                await _peek_to_table(backend, address, sel, from_sequence, limit)
            else:
                emitter = Emitter(fmt, query=q, tsv_keys=PEEK_TSV_KEYS)
                await _peek_to_document(backend, address, sel, from_sequence, limit, emitter)
        return fmt

    _warn_if_query_found_nothing(q, run(ctx, work, reads_only=True))


async def _peek_to_table(backend: Any, address: Address, sel: Selection, from_sequence: int, limit: int | None) -> None:
    """A table of the first `limit` messages, and a note pointing at the rest."""
    from sbdlq.operations.browse import iter_messages

    # Rows, not messages: a table of large messages must not hold their bodies.
    rows: list[tuple[Any, ...]] = []
    last_sequence = 0
    # One more than shown tells whether to point at the rest.
    async for m in iter_messages(
        backend, address, selection=sel, from_sequence=from_sequence, limit=None if limit is None else limit + 1
    ):
        if limit is not None and len(rows) == limit:
            break
        rows.append(_peek_row(m))
        last_sequence = m.sequence_number
    else:
        limit = None  # no more than shown
    _peek_table(rows, str(address))
    if limit is not None:
        note(f"sbdlq: showing the first {limit}; see more with --from-sequence {last_sequence + 1}, --max N or --all")


async def _peek_to_document(
    backend: Any, address: Address, sel: Selection, from_sequence: int, limit: int | None, emitter: Emitter
) -> None:
    """Every message as it arrives, as one json/yaml document or one jsonl line each."""
    from sbdlq.operations.browse import iter_messages
    from sbdlq.render import progress

    emitter.begin()
    try:
        # No bar when stdout is the same terminal: it would tear the output.
        with progress(f"peek {address}", enabled=not sys.stdout.isatty()) as bars:
            tick = bars(None) if limit is None else None
            async for m in iter_messages(
                backend, address, selection=sel, from_sequence=from_sequence, limit=limit, on_page=tick
            ):
                emitter.item(m.to_json())
    finally:
        # Close the document even when interrupted: stdout stays valid JSON
        # and the exit status says the list is incomplete.
        emitter.end()


# ---------------------------------------------------------------------- inspect-reason


ByOpt = Annotated[
    str,
    typer.Option(
        "--by",
        help="reason, description, source, subject, property:NAME, hour, day or entity.",
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
    q = _query(ctx, query)
    if entity is None:
        from sbdlq.cli.namespace import inspect_namespace

        inspect_namespace(ctx, sub_queue, by=by, selection=selection, output=output, q=q)
        return
    from sbdlq.operations.browse import group_key, inspect_reasons
    from sbdlq.render import progress

    async def work(s: Settings) -> tuple[str, list[Any]]:
        address = _address(entity, sub_queue)
        group_key(by)  # reject a bad --by before any I/O
        sel = selection.compile()
        fmt = output_format(s, output)
        async with open_target(s) as backend:
            await backend.get_entity(address.entity)
            with progress(f"scan {address}") as bars:
                groups = await inspect_reasons(backend, address, by=by, selection=sel, on_page=bars(None))
        return fmt, groups

    fmt, groups = run(ctx, work, reads_only=True)
    if fmt != "table" or q is not None:
        _write([g.to_json() for g in groups], fmt, q)
        return
    _reasons_table(groups, by)
    if _chart_wanted() and groups:
        _reasons_chart(groups, by)


def _reasons_table(groups: list[Any], by: str) -> None:
    from sbdlq.render import Col, table

    table(
        # The key (a reason, a description, ...) is what the operator came for: never cut.
        [Col("key", whole=True, min_width=12), *group_stat_columns()],
        [(g.key, *group_stats(g)) for g in groups],
        title=f"{sum(g.count for g in groups)} message(s) by {by}",
    )


def group_stat_columns() -> list[Any]:
    """The table columns of `group_stats`, shared by every report of reason groups."""
    from sbdlq.render import Col

    return [
        Col("count", numeric=True),
        Col("first_enqueued", whole=True, min_width=20),
        Col("last_enqueued", whole=True, min_width=20),
        Col("samples", whole=True, min_width=7),
    ]


def group_stats(g: Any) -> tuple[Any, ...]:
    """A reason group's count, first and last enqueued times and sample sequence numbers, as table cells."""
    samples = ", ".join(str(n) for n in g.sample_sequence_numbers)
    return g.count, _time(g.first_enqueued), _time(g.last_enqueued), samples


def _reasons_chart(groups: list[Any], by: str) -> None:
    from sbdlq.operations.browse import timeline
    from sbdlq.render import bar_chart

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
    older_than: Annotated[
        str | None, typer.Option("--older-than", help="Only messages enqueued more than this long ago (7d).")
    ] = None,
    export: Annotated[
        Path | None,
        typer.Option("--export", help="Append each message to this JSONL file (synced) before deleting it."),
    ] = None,
    export_follow_symlinks: Annotated[
        bool, typer.Option("--export-follow-symlinks", help="Let --export write through a symlink.")
    ] = False,
    batch_size: Annotated[int, count_option("--batch-size", "Messages per batch.")] = 500,
    concurrency: Annotated[
        int, count_option("--concurrency", "Messages in flight at most (--export: bodies held).")
    ] = 32,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be deleted; change nothing.")] = False,
    yes: Yes = False,
    selection: SelectionOptions = NO_SELECTION,
    output: Output = None,
    query: QueryOpt = None,
) -> None:
    """Delete DLQ messages, optionally exporting each one first."""
    from sbdlq.operations.purge import purge as do_purge
    from sbdlq.render import progress

    async def work(s: Settings) -> tuple[str, Any]:
        address = _address(entity, sub_queue)
        sel = selection.compile(older_than=older_than)
        fmt = output_format(s, output)
        if export is not None:
            _check_export_path(export)
        if not dry_run and not yes and not _interactive():
            # Before any I/O: a script without --yes must not delete, nor wait for an answer.
            raise BadInput("purge needs --yes when stdin is not a terminal", hint="or try --dry-run first")
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
                    batch_size=_tuning(ctx, s, "batch_size", batch_size),
                    concurrency=_tuning(ctx, s, "concurrency", concurrency),
                    dry_run=dry_run,
                    note=_note,
                    progress=bars,
                    confirm=None if yes else lambda n: _confirm(address, n, export),
                )
        return fmt, result

    _change(ctx, query, work, output)


def _change(
    ctx: typer.Context,
    query: str | None,
    work: Callable[[Settings], Awaitable[tuple[str, Any]]],
    output: str | None = None,
) -> None:
    """Run a resubmit or purge under the error path, report it, and exit 1 when messages were left.

    Stopped by SIGINT or SIGTERM, it still reports what it did, then exits 130 or 143.
    """
    from sbdlq.operations.stopping import RunInterrupted

    q = _query(ctx, query)

    async def keeping_partial(s: Settings) -> tuple[str, Any, RunInterrupted | None]:
        try:
            fmt, result = await work(s)
        except RunInterrupted as stop:
            return output_format(s, output), stop.result, stop
        return fmt, result, None

    fmt, result, stop = run(ctx, keeping_partial)
    _report(fmt, result.to_json(), result.summary(), q)
    if stop is not None:
        from sbdlq.cli.common import fail

        fail(stop)
    _finish(ctx, result)


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


def _tuning(ctx: typer.Context, s: Settings, key: str, value: int | None, default: int | None = None) -> int:
    """--concurrency / --batch-size: the option when given, else the profile's value, else the default.

    The option's declared default is the one `--help` shows; a profile's value overrides it.
    """
    from click.core import ParameterSource

    if value is not None and ctx.get_parameter_source(key) not in (ParameterSource.DEFAULT, None):
        return value
    chosen = s.profile_default(key)
    if chosen:
        return int(chosen)
    if value is not None:
        return value
    assert default is not None
    return default


def _note(text: str) -> None:
    """A line from an operation: the plan is informational (see `note`), anything else a warning."""
    (note if text.startswith("plan:") else err)(f"sbdlq: {text}")


def _interactive() -> bool:
    """Whether a person can answer a prompt (stdin is a terminal)."""
    return sys.stdin.isatty()


def _confirm(address: Address, n: int, export: Path | None) -> None:
    """Ask on the terminal, with the number the plan found."""
    what = f"Export to {export} and delete" if export else "Delete"
    if not typer.confirm(f"{what} {n} message(s) from {address}?", default=False, err=True):
        raise OperationFailed("purge cancelled; nothing was deleted")


def _time(ts: Any) -> str:
    """A table's time: ISO 8601 UTC with a Z, to the second (json keeps the fraction)."""
    from datetime import UTC

    if ts is None:
        return ""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _peek_row(m: Any) -> tuple[Any, ...]:
    """A message as a peek table row: its body shortened, or its size when large or binary."""
    from sbdlq.models import body_text
    from sbdlq.operations.sizing import LARGE_BODY_BYTES
    from sbdlq.render import human_size

    if len(m.body) >= LARGE_BODY_BYTES:
        body = f"<{human_size(len(m.body))}>"
    else:
        text, enc = body_text(m.body)
        # Enough of the body for any width; the layout shortens it visibly to fit.
        body = text[:200] if enc == "utf-8" else f"<{len(m.body)} bytes>"
    return (
        m.sequence_number,
        _time(m.enqueued_time),
        m.delivery_count,
        m.dead_letter_reason,
        m.dead_letter_error_description,
        m.subject,
        m.message_id,
        body,
    )


def _peek_table(rows: list[tuple[Any, ...]], title: str) -> None:
    from sbdlq.render import Col, table

    # On a narrow terminal the least telling columns go first: deliveries, description, subject.
    # Identifiers (seq, time, reason, message id) are never cut; the free text gives way.
    table(
        [
            Col("seq", numeric=True),
            Col("enqueued", whole=True, min_width=20),
            Col("deliveries", numeric=True, drop=4),
            Col("reason", whole=True, min_width=12),
            Col("description", min_width=11, max_width=40, drop=3),
            Col("subject", min_width=7, max_width=24, drop=2),
            Col("message_id", whole=True, min_width=12),
            Col("body", min_width=12, max_width=60),
        ],
        rows,
        title=f"{title}: {len(rows)} message(s)",
    )


def _chart_wanted() -> bool:
    """Charts are for a person at a terminal, never for a pipe."""
    return sys.stdout.isatty()


def _emit_list(rows: list[dict[str, Any]], fmt: str, columns: list[str], q: Query | None = None) -> None:
    if fmt == "table" and q is None:
        from sbdlq.render import Col, table

        cols = [Col(c, whole=True, min_width=10) if c == "entity" else c for c in columns]
        table(cols, [[r[c] for c in columns] for r in rows])
    else:
        _write(rows, fmt, q)


def _write(data: Any, fmt: str, q: Query | None = None) -> None:
    from sbdlq.render import write_document

    write_document(data, fmt, query=q)


def _report(fmt: str, doc: dict[str, Any], summary: str, q: Query | None = None) -> None:
    if fmt == "table" and q is None:
        if doc.get("example") is not None:
            from sbdlq.cli.edit_options import example_table

            example_table(doc["example"])
        sys.stdout.write(summary + "\n")
    else:
        _write(doc, fmt, q)


def _warn_if_query_found_nothing(q: Query | None, fmt: str) -> None:
    """A jsonl --query that gave null on every line is most likely written for the whole list."""
    if q is not None and fmt == "jsonl" and q.found_nothing():
        err(
            f"sbdlq: warning: --query {q.expression!r} gave null on every line; with -o jsonl it applies "
            "to each record (e.g. --query message_id, not [].message_id)"
        )


def _query(ctx: typer.Context, expression: str | None) -> Query | None:
    """--query compiled before any work, a bad one reported on the one error path."""
    from sbdlq.render import compile_query

    with handled(ctx):
        return compile_query(expression)
    raise AssertionError("unreachable")


def _finish(ctx: typer.Context, result: "RunResult") -> None:
    """Exit 1 with the result's one line on stderr when it left anything undone (RunResult.left_over)."""
    from sbdlq.cli.common import settings

    if result.dry_run:
        return
    s = settings(ctx)
    for text in result.errors[1:]:
        s.log(text)
    left = result.left_over()
    if left is None:
        if result.errors:
            s.log(result.errors[0])
        return
    err(f"sbdlq: {left}")
    raise typer.Exit(int(ExitStatus.FAILED))
