"""What a producer sends (OutboundMessage) and what a move asks and reports (Choose, MovedBatch).

Apart from sbdlq.models (which re-exports them) so that `count`, which sends nothing, starts
without making them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sbdlq.messages import Message


@dataclass(slots=True)
class OutboundMessage:
    """A message to send: what a producer sets."""

    body: bytes = b""
    message_id: str | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    to: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    time_to_live_s: float | None = None
    scheduled_enqueue_time: datetime | None = None
    application_properties: dict[str, Any] = field(default_factory=dict)
    # AMQP body section kind: "data" (bytes), "value" or "sequence" (body holds the
    # encoded AMQP section so the listener can hand it back unchanged).
    body_type: str = "data"
    # Encoded AMQP sections the fields above would lose (typed application properties,
    # header, annotations, footer, several data sections): opaque to all but the listener.
    amqp: bytes | None = None


#: What Backend.move_available asks of its caller, inside the move's transaction: of the
#: messages read, those to move, each with its copy.
Choose = Callable[[list[Message]], list[tuple[Message, OutboundMessage]]]


@dataclass(frozen=True, slots=True)
class MovedBatch:
    """What one unlocked move did (Backend.move_available)."""

    #: available messages read after the cursor
    read: int
    #: of those, moved: copy sent, original gone
    moved: int
    #: the last sequence number read: the next call's cursor
    last_sequence: int
