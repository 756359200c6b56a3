"""The tables and documents several commands print: a list of rows, reason groups' stats,
fingerprint columns, a spread's first copies, and a time to the second in a table."""

from __future__ import annotations

import sys
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
        from sbdlq.output.render import Col, table

        cols = [Col(c, whole=True, min_width=10) if c == "entity" else c for c in columns]
        table(cols, [[r[c] for c in columns] for r in rows])
    else:
        write(rows, fmt, q)


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
