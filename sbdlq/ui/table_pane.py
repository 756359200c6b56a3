"""What the table panes share: one DataTable, its columns declared on the class, the row under the cursor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

T = TypeVar("T")


class TablePane(Vertical):
    """A pane around one DataTable, whose id and columns a subclass declares.

    Top to bottom: what `above_table` yields, the table, then a line of text (`BELOW_ID`).
    """

    TABLE_ID: ClassVar[str]
    #: (label, key) of each column, left to right.
    COLUMNS: ClassVar[tuple[tuple[str, str], ...]]
    BELOW_ID: ClassVar[str]
    ZEBRA_STRIPES: ClassVar[bool] = True

    def compose(self) -> ComposeResult:
        yield from self.above_table()
        yield DataTable(id=self.TABLE_ID, cursor_type="row", zebra_stripes=self.ZEBRA_STRIPES)
        yield Static("", id=self.BELOW_ID)

    def above_table(self) -> ComposeResult:
        """The widgets over the table (a title, a filter line)."""
        yield from ()

    @property
    def table(self) -> DataTable[Any]:
        return self.query_one(f"#{self.TABLE_ID}", DataTable)

    def on_mount(self) -> None:
        table = self.table
        for label, key in self.COLUMNS:
            table.add_column(label, key=key)

    def under_cursor(self, rows: Sequence[T]) -> T | None:
        """The one of `rows` (the rows as shown) under the table's cursor; None when there are none."""
        if not rows:
            return None
        return rows[min(self.table.cursor_row, len(rows) - 1)]
