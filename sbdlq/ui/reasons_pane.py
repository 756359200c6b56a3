"""Reasons pane: inspect-reason's table and bar chart; Enter filters the messages pane to a reason."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from operator import attrgetter
from typing import Any

from textual.app import ComposeResult
from textual.message import Message as TMessage
from textual.widgets import DataTable, Static

from sbdlq.groups import ReasonGroup
from sbdlq.ui.table_pane import Column, TablePane

BAR = 30


def bar_lines(groups: list[ReasonGroup], width: int = BAR) -> str:
    """One bar per reason, the longest `width` wide (text only: readable with NO_COLOR)."""
    if not groups:
        return ""
    top = max(g.count for g in groups) or 1
    label = min(max(len(g.key) for g in groups), 28)
    return "\n".join(f"{g.key[:label]:<{label}} {'█' * max(1, round(g.count * width / top))} {g.count}" for g in groups)


class ReasonsPane(TablePane):
    """Messages grouped by dead-letter reason."""

    TABLE_ID = "reasons"
    BELOW_ID = "reasons-chart"
    ZEBRA_STRIPES = False
    COLUMNS = (
        Column("reason", "reason", attrgetter("key")),
        Column("count", "count", attrgetter("count")),
        Column("first", "first", lambda g: minute(g.first_enqueued)),
        Column("last", "last", lambda g: minute(g.last_enqueued)),
    )

    @dataclass
    class Chosen(TMessage):
        """The operator picked a reason to filter on."""

        reason: str

    def above_table(self) -> ComposeResult:
        yield Static("Open a DLQ to see why its messages failed.", id="reasons-title")

    def scanning(self, what: str) -> None:
        self.query_one("#reasons-title", Static).update(f"scanning {what} ...")

    def show(self, what: str, groups: list[ReasonGroup]) -> None:
        self.add_rows(groups, key=attrgetter("key"))
        total = sum(g.count for g in groups)
        self.query_one("#reasons-title", Static).update(f"{what}: {total} message(s) by reason · Enter: filter")
        self.query_one("#reasons-chart", Static).update(bar_lines(groups))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        reason = event.row_key.value  # each row's key is its group's key
        if reason is not None:
            self.post_message(self.Chosen(reason))


def minute(ts: Any) -> str:
    """A table time to the minute, UTC (empty when there is none)."""
    return "" if ts is None else ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
