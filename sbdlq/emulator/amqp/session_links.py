"""What a session receiver's attach carries, read and answered (DESIGN §7).

The client asks for a session with `com.microsoft:session-filter` on the source filter (an id,
or null for the next available one) and, for the next available one, says how long it will
wait in the `com.microsoft:timeout` link property (milliseconds). The answer names the session
in the same filter and its lock's end in `com.microsoft:locked-until-utc` (.NET ticks).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from proton import Link, Sender, symbol

from sbdlq.addresses import Address
from sbdlq.models import ReceiveMode

from .plain_values import as_text

SESSION_FILTER = "com.microsoft:session-filter"
SESSION_LOCKED_UNTIL = "com.microsoft:locked-until-utc"
TIMEOUT = "com.microsoft:timeout"
DEFAULT_WAIT_S = 60.0  # the broker's own operation timeout when the client names none
_DOTNET_EPOCH_TICKS = 621355968000000000


@dataclass(eq=False, slots=True)
class WaitingAttach:
    """A next-available session receiver the broker has not answered yet: no session was free."""

    link: Sender
    address: Address
    mode: ReceiveMode
    holder: str
    deadline: float  # monotonic seconds
    wait_s: float


def session_filter(link: Link) -> tuple[str | None, bool]:
    """The session id the client asked for, and whether it asked for a session at all."""
    data = link.remote_source.filter
    data.rewind()
    if data.next() is None:
        return None, False
    filters = data.get_object()
    if not isinstance(filters, dict):
        return None, False
    for name, value in filters.items():
        if str(name) == SESSION_FILTER:
            value = getattr(value, "value", value)  # a described filter or the bare id
            return as_text(value), True
    return None, False


def wait_seconds(link: Link) -> float:
    """How long the client waits for a next-available session (its `com.microsoft:timeout`)."""
    props = link.remote_properties
    if isinstance(props, dict):
        for name, value in props.items():
            if str(name) == TIMEOUT and isinstance(value, int) and value >= 0:
                return value / 1000.0
    return DEFAULT_WAIT_S


def announce(link: Link, session_id: str, locked_until: datetime) -> None:
    """Name the session the link got and its lock's end in the attach we send back."""
    data = link.source.filter
    data.clear()
    data.put_object({symbol(SESSION_FILTER): session_id})
    ticks = int(locked_until.timestamp() * 10_000_000) + _DOTNET_EPOCH_TICKS
    link.properties = {symbol(SESSION_LOCKED_UNTIL): ticks}
