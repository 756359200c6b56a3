"""What the table panes share: one DataTable, its columns declared once (title + value), the row under the cursor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Column(Generic[R]):
    """One column of a table pane: its title, its key (what tests and cell updates name it by)
    and how a row's cell is read. A pane's list of these is the only place its columns are named."""

    title: str
    key: str
    value: Callable[[R], Any]


class TablePane(Vertical):
    """A pane around one DataTable, whose id and columns a subclass declares.

    Top to bottom: what `above_table` yields, the table, then a line of text (`BELOW_ID`).
    """

    TABLE_ID: ClassVar[str]
    #: The columns, left to right; the rows are what `columns()` reads cells from.
    COLUMNS: ClassVar[tuple[Column[Any], ...]]
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
        for column in self.columns():
            table.add_column(column.title, key=column.key)

    def columns(self) -> Sequence[Column[Any]]:
        """The columns shown: COLUMNS (a pane adds one that reads its own state, such as marks)."""
        return self.COLUMNS

    def add_rows(self, rows: Sequence[Any], key: Callable[[Any], str]) -> None:
        """Replace the table's rows: each row's cells as its columns read them."""
        table = self.table
        table.clear()
        columns = self.columns()
        for row in rows:
            table.add_row(*(c.value(row) for c in columns), key=key(row))

    def under_cursor(self, rows: Sequence[T]) -> T | None:
        """The one of `rows` (the rows as shown) under the table's cursor; None when there are none."""
        if not rows:
            return None
        return rows[min(self.table.cursor_row, len(rows) - 1)]
