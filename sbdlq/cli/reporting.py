"""What the commands print and how a run ends: documents, shared table columns, run reports, exit status.

The one library the command modules share (dlq.py, copy_cmds.py and the views count_views.py
and namespace.py): command modules import this, never each other. Nothing here defines a
command. `chart_wanted` is looked up on this module at call time, so tests can stand in a
terminal for it.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import typer

from sbdlq.addresses import SubQueue
from sbdlq.cli.common import Settings, err, handled, note, output_format, run
from sbdlq.errors import ExitStatus
from sbdlq.output.formats import FORMATS, draws_table
from sbdlq.output.render import Query

if TYPE_CHECKING:
    from sbdlq.results import RunResult


def queue_name(sub_queue: SubQueue) -> str:
    """The sub-queue as a line names it: `dead-letter queue` or `transfer dead-letter queue`."""
    return "transfer dead-letter queue" if sub_queue is SubQueue.TRANSFER_DEAD_LETTER else "dead-letter queue"


def query(ctx: typer.Context, expression: str | None) -> Query | None:
    """--query compiled before any work, a bad one reported on the one error path."""
    from sbdlq.output.render import compile_query

    with handled(ctx):
        return compile_query(expression)
    raise AssertionError("unreachable")


def warn_if_query_found_nothing(q: Query | None, fmt: str) -> None:
    """A per-record --query (jsonl) that gave null on every line is most likely written for the whole list."""
    if q is not None and FORMATS[fmt].per_record and q.found_nothing():
        err(
            f"sbdlq: warning: --query {q.expression!r} gave null on every line; with -o {fmt} it applies "
            "to each record (e.g. --query message_id, not [].message_id)"
        )


def operation_note(text: str) -> None:
    """A line from an operation: the plan is informational (see `note`), anything else a warning."""
    (note if text.startswith("plan:") else err)(f"sbdlq: {text}")


def write(data: Any, fmt: str, q: Query | None = None) -> None:
    """One document on stdout in the format, after the query."""
    from sbdlq.output.formats import write_document

    write_document(data, fmt, query=q)


def emit_list(rows: list[dict[str, Any]], fmt: str, columns: list[str], q: Query | None = None) -> None:
    """Rows as a table for a person (the entity column never cut), else as a document."""
    if draws_table(fmt, q):
        from sbdlq.output.render import Col, table

        cols = [Col(c, whole=True, min_width=10) if c == "entity" else c for c in columns]
        table(cols, [[r[c] for c in columns] for r in rows])
    else:
        write(rows, fmt, q)


def group_output(s: Settings, given: str | None) -> str:
    """inspect-reason's -o: prometheus refused in one line (its groups, fingerprints above all, are unbounded)."""
    from sbdlq.errors import BadInput
    from sbdlq.output.prometheus import FORMAT

    if (given or "").strip().lower() == FORMAT:
        raise BadInput(
            "inspect-reason offers no -o prometheus: its groups (fingerprints, descriptions) are unbounded, "
            "and a label per group would make an unbounded label set",
            hint="use -o json, or count -o prometheus for gauges per entity",
        )
    return output_format(s, given)


def fingerprint_columns() -> list[Any]:
    """The columns a fingerprint group adds before its stats: its id, reason and template."""
    from sbdlq.output.render import Col

    return [
        Col("fingerprint", whole=True, min_width=8),
        Col("reason", min_width=8),
        # The template is what the operator came for: never cut.
        Col("template", whole=True, min_width=20),
    ]


def warn_nearest(passed: Any) -> None:
    """When a selection took nothing of a DLQ that was not empty: one line naming the nearest values
    (a `nearest.PassedOver`); always shown, `-o none` too, and the exit status stays 0."""
    hint = passed.hint()
    if hint is not None:
        err(f"sbdlq: warning: {hint}")


def chart_wanted() -> bool:
    """Charts are for a person at a terminal, never for a pipe."""
    return sys.stdout.isatty()


def table_time(ts: Any) -> str:
    """A table's time: ISO 8601 UTC with a Z, to the second (json keeps the fraction)."""
    from datetime import UTC

    if ts is None:
        return ""
    return str(ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


def group_stat_columns() -> list[Any]:
    """The table columns of `group_stats`, shared by every report of reason groups."""
    from sbdlq.output.render import Col

    return [
        Col("count", numeric=True),
        Col("first_enqueued", whole=True, min_width=20),
        Col("last_enqueued", whole=True, min_width=20),
        Col("samples", whole=True, min_width=7),
    ]


def group_stats(g: Any) -> tuple[Any, ...]:
    """A reason group's count, first and last enqueued times and sample sequence numbers, as table cells."""
    samples = ", ".join(str(n) for n in g.sample_sequence_numbers)
    return g.count, table_time(g.first_enqueued), table_time(g.last_enqueued), samples


#: Copies of a spread a table shows before it names the record that holds them all.
SPREAD_SHOWN = 20
#: The spread copies table's columns: keys of each copy in a result's `spread.copies`.
SPREAD_COLUMNS = ["seq", "copy", "at", "message_id"]


def report(fmt: str, doc: dict[str, Any], summary: str, q: Query | None = None) -> None:
    """A run's result: its summary line (and edited example, a spread's copies) for a person, else the document."""
    if draws_table(fmt, q):
        if doc.get("example") is not None:
            from sbdlq.cli.edit_options import example_table

            example_table(doc["example"])
        if doc.get("spread"):
            spread_table(doc["spread"])
        sys.stdout.write(summary + "\n")
    else:
        write(doc, fmt, q)


def spread_table(spread: dict[str, Any]) -> None:
    """The first copies of a spread (original, copy's sequence number, time); the record has them all."""
    from sbdlq.output.render import table

    copies = spread.get("copies") or []
    if not copies:
        return
    table(SPREAD_COLUMNS, [[c[k] for k in SPREAD_COLUMNS] for c in copies[:SPREAD_SHOWN]])
    if len(copies) > SPREAD_SHOWN:
        sys.stdout.write(f"... and {len(copies) - SPREAD_SHOWN} more copies in {spread['file']}\n")


def change(
    ctx: typer.Context,
    expression: str | None,
    work: Callable[[Settings], Awaitable[tuple[str, Any]]],
    output: str | None = None,
) -> None:
    """Run a resubmit or purge under the error path, report it, and exit 1 when messages were left.

    Stopped by SIGINT or SIGTERM, it still reports what it did, then exits 130 or 143.
    """
    from sbdlq.operations.stopping import RunInterrupted

    q = query(ctx, expression)

    async def keeping_partial(s: Settings) -> tuple[str, Any, RunInterrupted | None]:
        try:
            fmt, result = await work(s)
        except RunInterrupted as stop:
            return output_format(s, output), stop.result, stop
        return fmt, result, None

    fmt, result, stop = run(ctx, keeping_partial)
    report(fmt, result.to_json(), result.summary(), q)
    if result.hint is not None:
        err(f"sbdlq: warning: {result.hint}")  # a typo that takes nothing must not pass for success
    if stop is not None:
        from sbdlq.cli.common import fail

        fail(stop)
    finish(ctx, result)


def finish(ctx: typer.Context, result: RunResult) -> None:
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
