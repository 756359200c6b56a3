"""The tables and documents several commands print: a list of rows (once, or redrawn in place
by a watch), reason groups' stats, fingerprint columns, a spread's first copies, a dry run's
example copy, plain aligned columns, and a time to the second in a table."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sbdlq.output.formats import draws_table
from sbdlq.output.render import Query


def write(data: Any, fmt: str, q: Query | None = None) -> None:
    """One document on stdout in the format, after the query."""
    from sbdlq.output.formats import write_document

    write_document(data, fmt, query=q)


def emit_list(rows: list[dict[str, Any]], fmt: str, columns: list[str], q: Query | None = None) -> None:
    """Rows as a table for a person (the entity column never cut), else as a document."""
    if draws_table(fmt, q):
        from sbdlq.output.render import table

        table(_list_columns(columns), [[r[c] for c in columns] for r in rows])
    else:
        write(rows, fmt, q)


def _list_columns(columns: Sequence[str]) -> list[Any]:
    """A list's table columns: the entity column never cut."""
    from sbdlq.output.render import Col

    return [Col(c, whole=True, min_width=10) if c == "entity" else c for c in columns]


def watch_header(every: str, at: datetime, *, live: bool = False) -> str:
    """The line above each snapshot of a watch (`Every 5s: <UTC time>`); redrawn live, how to stop it."""
    return f"Every {every}: {table_time(at)}" + ("    (Ctrl-C to stop)" if live else "")


class LiveList:
    """Rows as `emit_list` draws them, one table redrawn in place under a header line (Rich Live on stdout)."""

    def __init__(self) -> None:
        from rich.live import Live

        from sbdlq.output.render import stdout_console

        self.console = stdout_console()
        self.live = Live(console=self.console, auto_refresh=False, redirect_stdout=False)
        self.live.start()

    def show(self, header: str, rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
        """Replace what is shown with the header line and the rows' table."""
        from rich.console import Group
        from rich.text import Text

        from sbdlq.output.render import table_renderable

        body = table_renderable(_list_columns(columns), [[r[c] for c in columns] for r in rows], console=self.console)
        self.live.update(Group(Text(header), body), refresh=True)

    def close(self) -> None:
        """Stop redrawing; the last table stays on the screen."""
        self.live.stop()


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Aligned columns, nothing cut: paths and endpoints stay whole and greppable (`config list`, `config show`)."""
    import click  # each line written as the commands' own lines are (click.echo)

    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    for line in [columns, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def example_table(rows: Sequence[Sequence[str]], sequence_number: int) -> None:
    """The dry run's example: what the edits and the copy rules change on one message (field, before, after)."""
    from sbdlq.output.render import Col, table

    table(
        [Col("field", whole=True), Col("before", min_width=8), Col("after", min_width=8)],
        rows,
        title=f"example: the copy of sequence number {sequence_number}",
    )


def table_time(ts: Any) -> str:
    """A table's time: ISO 8601 UTC with a Z, to the second (json keeps the fraction)."""
    from datetime import UTC

    if ts is None:
        return ""
    return str(ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


def fingerprint_columns() -> list[Any]:
    """The columns a fingerprint group adds before its stats: its id, reason and template."""
    from sbdlq.output.render import Col

    return [
        Col("fingerprint", whole=True, min_width=8),
        Col("reason", min_width=8),
        # The template is what the operator came for: never cut.
        Col("template", whole=True, min_width=20),
    ]


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
#: The spread copies table's columns: keys of each copy in the `copies` of a result's `spread`.
SPREAD_COLUMNS = ["seq", "copy", "at", "message_id"]


def spread_table(spread: dict[str, Any]) -> None:
    """The first copies of a spread (original, copy's sequence number, time); the record has them all."""
    from sbdlq.output.render import table

    copies = spread.get("copies") or []
    if not copies:
        return
    table(SPREAD_COLUMNS, [[c[k] for k in SPREAD_COLUMNS] for c in copies[:SPREAD_SHOWN]])
    if len(copies) > SPREAD_SHOWN:
        sys.stdout.write(f"... and {len(copies) - SPREAD_SHOWN} more copies in {spread['file']}\n")
