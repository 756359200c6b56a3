"""`inspect-reason` with no ENTITY: every DLQ (or transfer DLQ) of the namespace in one report."""

from __future__ import annotations

from collections import Counter
from typing import Any

import typer

from sbdlq.addresses import SubQueue
from sbdlq.cli import reporting
from sbdlq.cli.error_path import guarded
from sbdlq.cli.options import SelectionOptions
from sbdlq.cli.settings import Settings
from sbdlq.cli.target import open_target
from sbdlq.output import report_tables
from sbdlq.output.render import Query


def inspect_namespace(
    ctx: typer.Context,
    sub_queue: SubQueue,
    *,
    by: str,
    selection: SelectionOptions,
    output: str | None,
    q: Query | None,
) -> None:
    """Scan every non-empty DLQ of the namespace, group per entity and key, render."""
    from sbdlq.operations.browse import group_key
    from sbdlq.operations.namespace import inspect_namespace as scan
    from sbdlq.output.render import progress

    async def work(s: Settings) -> tuple[str, list[Any]]:
        group_key(by)  # reject a bad --by before any I/O
        sel = selection.compile()
        fmt = reporting.group_output(s, output)
        async with open_target(s) as backend:
            with progress(f"scan every {reporting.queue_name(sub_queue)}") as bars:
                groups = await scan(backend, sub_queue, by=by, selection=sel, progress=bars)
        return fmt, groups

    fmt, groups = guarded(ctx, work, reads_only=True)
    from sbdlq.output.formats import draws_table

    if not draws_table(fmt, q):
        report_tables.write([g.to_json() for g in groups], fmt, q)
        return
    _table(groups, by, sub_queue)
    if reporting.chart_wanted() and groups:
        _chart(groups, by)


def _table(groups: list[Any], by: str, sub_queue: SubQueue) -> None:
    from sbdlq.operations.browse import is_fingerprint_grouping
    from sbdlq.output.render import Col, table
    from sbdlq.output.report_tables import fingerprint_columns, group_stat_columns, group_stats

    if is_fingerprint_grouping(by):
        # One failure wherever it landed: a row per fingerprint, with the entities it is in.
        entities = len({e for g in groups for e in g.entities or ()})
        table(
            [*fingerprint_columns(), Col("entities", numeric=True), *group_stat_columns()],
            [(g.key, g.reason, g.template, len(g.entities or ()), *group_stats(g)) for g in groups],
            title=f"{sum(g.count for g in groups)} message(s) in {entities} {reporting.queue_name(sub_queue)}(s) "
            f"by fingerprint",
        )
        return

    # `--by entity`: the key is the entity; one column says it.
    keyed = by.strip().lower() != "entity"
    columns = [
        Col("entity", whole=True, min_width=10),
        *([Col("key", whole=True, min_width=12)] if keyed else []),
        *group_stat_columns(),
    ]
    rows = [(g.entity, *([g.key] if keyed else []), *group_stats(g)) for g in groups]
    entities = len({g.entity for g in groups})
    total = sum(g.count for g in groups)
    table(columns, rows, title=f"{total} message(s) in {entities} {reporting.queue_name(sub_queue)}(s) by {by}")


def _chart(groups: list[Any], by: str) -> None:
    """Bars of the namespace's totals per key (per entity with `--by entity`), time in order."""
    from sbdlq.operations.browse import is_time_grouping, timeline
    from sbdlq.output.render import bar_chart

    totals: Counter[str] = Counter()
    for g in groups:
        totals[g.key] += g.count
    if is_time_grouping(by):
        bar_chart(timeline(_as_groups(sorted(totals.items())), by), title=f"messages per {by} (UTC)")
    else:
        bar_chart(sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])), title=f"messages by {by}")


def _as_groups(items: list[tuple[str, int]]) -> list[Any]:
    from sbdlq.groups import ReasonGroup

    return [ReasonGroup(key=k, count=n) for k, n in items]
