"""Detail pane: every system and application property of one message, and its body."""

from __future__ import annotations

import base64
import json
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from sbdlq.models import MESSAGE_FIELDS, Message, iso

HEX_ROW = 16


def body_view(body: bytes, binary_as: str = "hex") -> tuple[str, str]:
    """(how it is shown, the text): JSON pretty-printed, text as is, binary as hex or base64."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        if binary_as == "base64":
            return "base64", base64.b64encode(body).decode("ascii")
        return "hex", hex_dump(body)
    try:
        return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return "text", text


def hex_dump(data: bytes) -> str:
    """Offset, hex bytes and printable ASCII, 16 bytes a line."""
    lines = []
    for at in range(0, len(data), HEX_ROW):
        chunk = data[at : at + HEX_ROW]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  {printable}")
    return "\n".join(lines)


def describe(m: Message, binary_as: str = "hex") -> Text:
    """The message as a text block: system properties, application properties, body."""
    out = Text()
    out.append("System properties\n", style="bold")
    for f in MESSAGE_FIELDS:
        value = f.value(m)
        out.append(f"  {f.name}: ", style="bold")
        out.append(f"{_plain(iso(value) if f.kind == 'time' else value)}\n")
    out.append("Application properties\n", style="bold")
    for key, value in m.application_properties.items():
        out.append(f"  {key}: ", style="bold")
        out.append(f"{_plain(value)}\n")
    if not m.application_properties:
        out.append("  (none)\n")
    shown_as, body = body_view(m.body, binary_as)
    out.append(f"Body ({len(m.body)} bytes, {shown_as})\n", style="bold")
    out.append(body + "\n")
    return out


def _plain(value: Any) -> str:
    return "" if value is None else str(value)


class DetailPane(VerticalScroll):
    """One message in full; `b` shows a binary body as hex or base64."""

    BINDINGS = [Binding("b", "toggle_binary", "Hex/base64")]  # noqa: RUF012

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message: Message | None = None
        self.binary_as = "hex"

    def compose(self) -> ComposeResult:
        yield Static("Choose a message in the Messages pane (Enter).", id="detail-text")

    def show(self, message: Message) -> None:
        self.message = message
        self.query_one("#detail-text", Static).update(describe(message, self.binary_as))
        self.scroll_home(animate=False)

    def action_toggle_binary(self) -> None:
        self.binary_as = "base64" if self.binary_as == "hex" else "hex"
        if self.message is not None:
            self.show(self.message)
