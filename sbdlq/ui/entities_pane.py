"""Entities pane: every queue and subscription with its counts, refreshed, sorted, filtered (`/`) as you type."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message as TMessage
from textual.widgets import DataTable, Input, Static

from sbdlq.addresses import Address, SubQueue, parse_entity
from sbdlq.models import COUNT_FIELDS, Counts
from sbdlq.ui.fields import KeyOrderInput
from sbdlq.ui.table_pane import Column, TablePane

#: The dead-letter sub-queues' counts, in declaration order: what "sorted by DLQ size" compares.
DLQ_COUNTS = tuple(f.name for f in COUNT_FIELDS if f.dead_letter)


def by_dlq_size(counts: Counts) -> tuple[Any, ...]:
    """The sort key of "DLQ size": the largest dead-letter count first, then the name."""
    return (*(-getattr(counts, name) for name in DLQ_COUNTS), counts.entity.lower())


class EntitiesPane(TablePane):
    """Counts per entity; Enter opens its DLQ, `t` its transfer DLQ."""

    BINDINGS = [  # noqa: RUF012 (Textual's declaration style)
        Binding("enter", "open_dlq", "Open DLQ", show=True),
        Binding("t", "open_transfer", "Transfer DLQ"),
        Binding("s", "toggle_sort", "Sort"),
        Binding("slash", "focus_filter", "Filter"),
        Binding("escape", "leave_filter", "Leave filter", show=False),
    ]
    TABLE_ID = "entities"
    BELOW_ID = "entity-status"
    #: The entity, then every count (models.COUNT_FIELDS), the dead-letter sub-queues first.
    COLUMNS = (
        Column("entity", "entity", attrgetter("entity")),
        *(
            Column(f.console_title, f.name, attrgetter(f.name))
            for f in sorted(COUNT_FIELDS, key=lambda f: not f.dead_letter)
        ),
    )

    @dataclass
    class Opened(TMessage):
        """The operator chose a DLQ to browse."""

        address: Address

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counts: list[Counts] = []
        self.by_size = True

    def above_table(self) -> ComposeResult:
        yield KeyOrderInput(placeholder="/ filters entities (Enter or Esc: back to the list)", id="entity-filter")

    def show(self, counts: list[Counts]) -> None:
        """Replace the rows, keeping the cursor on the same entity."""
        self.counts = counts
        self._render_rows()

    def shown_rows(self) -> list[Counts]:
        """The rows as shown: filtered by the typed text, sorted by DLQ size (or name)."""
        text = self.query_one("#entity-filter", Input).value.strip().lower()
        rows = [c for c in self.counts if text in c.entity.lower()]
        if self.by_size:
            return sorted(rows, key=by_dlq_size)
        return sorted(rows, key=lambda c: c.entity.lower())

    def _render_rows(self) -> None:
        current = self.selected_entity()
        rows = self.shown_rows()
        self.add_rows(rows, key=attrgetter("entity"))
        for i, c in enumerate(rows):
            if c.entity == current:
                self.table.move_cursor(row=i)
        order = "DLQ size" if self.by_size else "name"
        self.query_one("#entity-status", Static).update(
            f"{len(rows)} of {len(self.counts)} entities, by {order} · Enter: DLQ · t: transfer DLQ · s: sort"
        )

    def selected_entity(self) -> str | None:
        if self.table.row_count == 0:
            return None
        row = self.under_cursor(self.shown_rows())
        return None if row is None else row.entity

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "entity-filter":
            self._render_rows()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "entity-filter":
            self.table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._open(SubQueue.DEAD_LETTER)

    def action_open_dlq(self) -> None:
        self._open(SubQueue.DEAD_LETTER)

    def action_open_transfer(self) -> None:
        self._open(SubQueue.TRANSFER_DEAD_LETTER)

    def action_toggle_sort(self) -> None:
        self.by_size = not self.by_size
        self._render_rows()

    def action_focus_filter(self) -> None:
        self.query_one("#entity-filter", Input).focus()

    def action_leave_filter(self) -> None:
        self.table.focus()

    def _open(self, sub_queue: SubQueue) -> None:
        entity = self.selected_entity()
        if entity is not None:
            self.post_message(self.Opened(Address(parse_entity(entity), sub_queue)))
