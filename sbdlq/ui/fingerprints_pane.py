"""Fingerprints pane: `inspect-reason --by fingerprint`'s groups; Enter filters the messages pane to one."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from textual.app import ComposeResult
from textual.message import Message as TMessage
from textual.widgets import DataTable, Static

from sbdlq.groups import FingerprintGroup
from sbdlq.ui.reasons_pane import minute
from sbdlq.ui.table_pane import Column, TablePane


class FingerprintsPane(TablePane):
    """Messages grouped by what went wrong: the reason and description with their variable parts masked."""

    TABLE_ID = "fingerprints"
    BELOW_ID = "fingerprints-note"
    COLUMNS = (
        Column("fingerprint", "fingerprint", attrgetter("key")),
        Column("count", "count", attrgetter("count")),
        Column("reason", "reason", attrgetter("reason")),
        Column("template", "template", attrgetter("template")),
        Column("first", "first", lambda g: minute(g.first_enqueued)),
        Column("last", "last", lambda g: minute(g.last_enqueued)),
    )

    @dataclass
    class Chosen(TMessage):
        """The operator picked a fingerprint to filter on."""

        fingerprint: str

    def above_table(self) -> ComposeResult:
        yield Static("Open a DLQ to see its failures grouped by fingerprint.", id="fingerprints-title")

    def scanning(self, what: str) -> None:
        self.query_one("#fingerprints-title", Static).update(f"scanning {what} ...")

    def show(self, what: str, groups: list[FingerprintGroup]) -> None:
        self.add_rows(groups, key=attrgetter("key"))
        total = sum(g.count for g in groups)
        self.query_one("#fingerprints-title", Static).update(
            f"{what}: {total} message(s) in {len(groups)} fingerprint(s) · Enter: filter"
        )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        fingerprint = event.row_key.value  # each row's key is its fingerprint id
        if fingerprint is not None:
            self.post_message(self.Chosen(fingerprint))
