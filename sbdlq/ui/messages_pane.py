"""Messages pane: one page of a DLQ at a time (peek from a sequence number), a filter line, marks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message as TMessage
from textual.widgets import DataTable, Input, Static

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend
from sbdlq.errors import SbdlqError
from sbdlq.models import MESSAGE_FIELD, Message
from sbdlq.selection import Selection
from sbdlq.ui.fields import KeyOrderInput
from sbdlq.ui.filterline import Filter, parse_filter
from sbdlq.ui.table_pane import Column, TablePane

PAGE_ROWS = 100


def field_column(name: str, show: Callable[[Any], Any] | None = None) -> Column[Message]:
    """A column of one of MESSAGE_FIELDS (its title and value), its value shown through `show`."""
    f = MESSAGE_FIELD[name]
    return Column(f.title, f.name, f.value if show is None else lambda m: show(f.value(m)))


def _cut(width: int) -> Callable[[Any], str]:
    """A text value, at most `width` characters (the free text gives way to the identifiers)."""
    return lambda value: (value or "")[:width]


def _short_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


#: The Messages table, left to right after the mark: a new column is one line here. The
#: identifiers come first, whole (at 80 columns a last column is cut at the edge: ids were
#: `ord-p`); the free text after them gives way.
MESSAGE_COLUMNS: tuple[Column[Message], ...] = (
    field_column("sequence_number"),
    field_column("enqueued_time", _short_time),
    field_column("message_id", lambda value: value or ""),
    field_column("dead_letter_reason", _cut(28)),
    field_column("subject", _cut(20)),
)


class MessagesPane(TablePane):
    """A page of the chosen DLQ; marks are sequence numbers, so they survive paging."""

    BINDINGS = [  # noqa: RUF012
        Binding("space", "mark", "Mark"),
        Binding("a", "mark_all", "All"),
        Binding("c", "clear_marks", "Clear marks", show=False),
        Binding("n", "next_page", "Next"),
        Binding("p", "previous_page", "Prev"),
        Binding("slash", "focus_filter", "Filter", show=False),
        Binding("escape", "leave_filter", "Leave filter", show=False),
    ]
    TABLE_ID = "messages"
    BELOW_ID = "messages-status"
    COLUMNS = MESSAGE_COLUMNS

    @dataclass
    class Chosen(TMessage):
        """The operator opened one message."""

        message: Message

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend: Backend | None = None
        self.address: Address | None = None
        self.filter = Filter()
        self.selection = Selection()
        self.page: list[Message] = []
        self.starts: list[int] = []  # the first sequence number of each page before this one
        self.start = 0
        self.has_more = False
        self.marked: set[int] = set()
        self.all_matching = False
        self.page_rows = PAGE_ROWS

    def above_table(self) -> ComposeResult:
        yield Static("Choose a DLQ in the Entities pane.", id="messages-title")
        yield KeyOrderInput(placeholder="filter: --reason X --where \"sys.Label = 'a'\" (Enter)", id="filter")

    async def open(self, backend: Backend, address: Address, filter_text: str | None = None) -> None:
        """Browse `address` from its first message (with a new filter when given)."""
        self.backend, self.address = backend, address
        self.marked.clear()
        self.all_matching = False
        if filter_text is not None:
            self.query_one("#filter", Input).value = filter_text
            if not self._apply_filter(filter_text):
                return
        self.starts, self.start = [], 0
        await self.load(0)

    async def load(self, start: int) -> None:
        """Peek one page from `start` (one more than shown tells whether there is a next page)."""
        from sbdlq.operations.browse import iter_messages

        if self.backend is None or self.address is None:
            return
        self.start = start
        try:
            got = [
                m
                async for m in iter_messages(
                    self.backend,
                    self.address,
                    selection=self.selection,
                    from_sequence=start,
                    limit=self.page_rows + 1,
                    page_size=self.page_rows + 1,
                )
            ]
        except SbdlqError as exc:
            self.app.notify(exc.line(), severity="error", timeout=8)
            got = []
        self.has_more = len(got) > self.page_rows
        self.page = got[: self.page_rows]
        self._render_rows()

    def columns(self) -> Sequence[Column[Any]]:
        """The mark (this pane's own state), then the message's columns."""
        return (Column("", "mark", self._mark_of), *self.COLUMNS)

    def _render_rows(self) -> None:
        self.add_rows(self.page, key=lambda m: str(m.sequence_number))
        self._render_status()

    def _mark_of(self, m: Message) -> str:
        return "*" if self.all_matching or m.sequence_number in self.marked else " "

    def _render_status(self) -> None:
        title = f"{self.address}" + (f"  filter: {self.filter.text}" if self.filter.text else "")
        self.query_one("#messages-title", Static).update(title)
        marks = "all that match marked" if self.all_matching else f"{len(self.marked)} marked"
        first = self.page[0].sequence_number if self.page else self.start
        more = "n: next page" if self.has_more else "last page"
        self.query_one("#messages-status", Static).update(
            f"page {len(self.starts) + 1} from seq {first}: {len(self.page)} shown · {marks} · {more}"
        )

    def current(self) -> Message | None:
        return self.under_cursor(self.page)

    def target(self) -> tuple[Selection, str] | None:
        """What an action acts on: the marked messages, or all that match; None when neither is chosen."""
        if self.all_matching:
            return self.selection, "all messages that match" + (f" {self.filter.text}" if self.filter.text else "")
        if self.marked:
            return self.filter.compile(marked=sorted(self.marked)), f"{len(self.marked)} marked message(s)"
        return None

    def _apply_filter(self, text: str) -> bool:
        try:
            self.filter = parse_filter(text)
        except SbdlqError as exc:
            self.app.notify(exc.line(), severity="error", timeout=8)
            return False
        self.selection = self.filter.compile()
        # Marks were chosen under the old filter: an action must not reach past what is shown.
        self.marked.clear()
        self.all_matching = False
        return True

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "filter":
            return
        event.stop()
        if self._apply_filter(event.value):
            self.starts = []
            # The table takes the keys at once: a key pressed while the page loads (`a`, Space)
            # is the operator's next step on the table, not more text for the filter.
            self.table.focus()
            await self.load(0)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        m = self.current()
        if m is not None:
            self.post_message(self.Chosen(m))

    def action_mark(self) -> None:
        m = self.current()
        if m is None:
            return
        if self.all_matching:
            self.all_matching = False
        self.marked ^= {m.sequence_number}
        table = self.table
        table.update_cell(str(m.sequence_number), "mark", self._mark_of(m))
        table.move_cursor(row=min(table.cursor_row + 1, len(self.page) - 1))
        self._render_status()

    def action_mark_all(self) -> None:
        self.all_matching = not self.all_matching
        self.marked.clear()
        self._render_rows()

    def action_clear_marks(self) -> None:
        self.all_matching = False
        self.marked.clear()
        self._render_rows()

    async def action_next_page(self) -> None:
        if self.has_more and self.page:
            self.starts.append(self.start)
            await self.load(self.page[-1].sequence_number + 1)

    async def action_previous_page(self) -> None:
        if self.starts:
            await self.load(self.starts.pop())

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_leave_filter(self) -> None:
        """Escape: back to the table; the filter in force stays the one last submitted (Enter)."""
        self.table.focus()
