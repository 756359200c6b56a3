"""The CLI's message tables (`peek`, `emulator receive`): which message fields each shows, and how.

A column names one of `sbdlq.messages.MESSAGE_FIELDS` (the one owner of the message fields: the
header is the field's title, the value the field's value, a number is right-aligned) or the
body, which each command previews its own way. The table and `-o tsv` read the same
declaration: tsv's keys are the columns' Message JSON keys, with full values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sbdlq.models import MESSAGE_FIELD, Message
from sbdlq.output.render import Col
from sbdlq.output.report_tables import table_time

#: The column of the body (not a message field): its Message JSON key and its header.
BODY = "body"


@dataclass(frozen=True)
class MessageColumn:
    """A table column of one message field (or the body), with its layout (see render.Col)."""

    #: a MESSAGE_FIELDS name, or BODY
    name: str
    #: the header, where the table's differs from the field's title
    header: str | None = None
    whole: bool = False
    min_width: int | None = None
    max_width: int | None = None
    drop: int = 0

    def col(self) -> Col:
        """The render column: a number (an int field) is right-aligned and never cut."""
        field = MESSAGE_FIELD.get(self.name)
        title = self.header or (field.title if field is not None else self.name)
        numeric = field is not None and field.kind == "int"
        return Col(title, numeric, self.whole, self.min_width, self.max_width, self.drop)

    def cell(self, m: Message, body: str) -> Any:
        """The value shown: a time to the second, the body as the command previews it."""
        if self.name == BODY:
            return body
        field = MESSAGE_FIELD[self.name]
        value = field.value(m)
        return table_time(value) if field.kind == "time" else value


#: `sbdlq peek`'s table. On a narrow terminal the least telling columns go first: deliveries,
#: description, subject. Identifiers (seq, time, reason, message id) are never cut; the free
#: text gives way.
PEEK_COLUMNS: tuple[MessageColumn, ...] = (
    MessageColumn("sequence_number"),
    MessageColumn("enqueued_time", whole=True, min_width=20),
    MessageColumn("delivery_count", drop=4),
    MessageColumn("dead_letter_reason", whole=True, min_width=12),
    MessageColumn("dead_letter_error_description", min_width=11, max_width=40, drop=3),
    MessageColumn("subject", min_width=7, max_width=24, drop=2),
    MessageColumn("message_id", header="message_id", whole=True, min_width=12),
    MessageColumn(BODY, min_width=12, max_width=60),
)

#: `sbdlq emulator receive`'s table.
RECEIVE_COLUMNS: tuple[MessageColumn, ...] = (
    MessageColumn("sequence_number", whole=True),
    MessageColumn("message_id", header="message_id", whole=True),
    MessageColumn("delivery_count", whole=True),
    MessageColumn("subject", max_width=24),
    MessageColumn("dead_letter_reason", whole=True),
    MessageColumn(BODY, min_width=12),
)


def tsv_keys(columns: Sequence[MessageColumn]) -> tuple[str, ...]:
    """`-o tsv`'s keys: the table's columns, as Message JSON keys."""
    return tuple(c.name for c in columns)


def table_columns(columns: Sequence[MessageColumn]) -> list[Col]:
    return [c.col() for c in columns]


def table_row(columns: Sequence[MessageColumn], m: Message, body: str) -> tuple[Any, ...]:
    """A message as a row of the table, its body already previewed."""
    return tuple(c.cell(m, body) for c in columns)
