"""How a command's output is chosen and how a run ends: --query, warnings, run reports, exit status.

The one library the command modules share (commands/dlq.py, commands/copies.py and the views count_views.py
and namespace_inspect.py): command modules import this, never each other; the tables and documents
they print in common are sbdlq/output's (`output/report_tables.py`). Nothing here defines a
command. `chart_wanted` is looked up on this module at call time, so tests can stand in a
terminal for it.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import typer

from sbdlq import terminal
from sbdlq.addresses import SubQueue
from sbdlq.cli.error_path import guarded, handled
from sbdlq.cli.notes import err, note
from sbdlq.cli.settings import Settings, output_format
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


def group_output(s: Settings, given: str | None) -> str:
    """inspect-reason's -o: a format it refuses in its own words (prometheus: its groups are unbounded) in one line."""
    from sbdlq.output.formats import refuse

    refuse("inspect-reason", given)
    return output_format(s, given)


def warn_nearest(passed: Any) -> None:
    """When a selection took nothing of a DLQ that was not empty: one line naming the nearest values
    (a `nearest.PassedOver`); always shown, `-o none` too, and the exit status stays 0."""
    hint = passed.hint()
    if hint is not None:
        err(f"sbdlq: warning: {hint}")


def chart_wanted() -> bool:
    """Charts are for a person at a terminal, never for a pipe."""
    return terminal.stdout_is_terminal()


def report(fmt: str, doc: dict[str, Any], summary: str, q: Query | None = None) -> None:
    """A run's result: its summary line (and edited example, a spread's copies) for a person, else the document."""
    if draws_table(fmt, q):
        if doc.get("example") is not None:
            from sbdlq.operations.edits import example_rows
            from sbdlq.output.report_tables import example_table

            example_table(example_rows(doc["example"]), doc["example"]["sequence_number"])
        if doc.get("spread"):
            from sbdlq.output.report_tables import spread_table

            spread_table(doc["spread"])
        sys.stdout.write(summary + "\n")
    else:
        from sbdlq.output.report_tables import write  # here: `count` prints without it

        write(doc, fmt, q)


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

    fmt, result, stop = guarded(ctx, keeping_partial)
    report(fmt, result.to_json(), result.summary(), q)
    if result.hint is not None:
        err(f"sbdlq: warning: {result.hint}")  # a typo that takes nothing must not pass for success
    if stop is not None:
        from sbdlq.cli.error_path import fail

        fail(stop)
    finish(ctx, result)


def finish(ctx: typer.Context, result: RunResult) -> None:
    """Exit 1 with the result's one line on stderr when it left anything undone (RunResult.left_over)."""
    from sbdlq.cli.settings import settings

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
