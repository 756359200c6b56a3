"""LoopStats: what a moving run's loop did, counted as it goes; the runs turn it into their results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sbdlq.models import Message


@dataclass
class LoopStats:
    """What the loop did; the operations turn it into their results."""

    handled: int = 0
    failed: int = 0
    #: received, did not match the selection, left in the DLQ
    not_matching: int = 0
    retries: int = 0
    #: never tried: in the DLQ when the run ended without having received them
    not_tried: int = 0
    #: copied (sent, exported) but still in the DLQ: their complete failed or their lock was lost
    left_beside_copy: int = 0
    #: the sequence numbers of those
    left_sequences: list[int] = field(default_factory=list)
    #: lost their lock before their action: nothing done with them, left for a later batch
    let_go: int = 0
    renewals: int = 0
    errors: list[str] = field(default_factory=list)
    #: set by an action when going on is pointless (target disabled, disk full, ...)
    aborted: str | None = None

    def error(self, text: str) -> None:
        """Keep the first few distinct error lines for the summary."""
        if text not in self.errors and len(self.errors) < 5:
            self.errors.append(text)

    def left_beside(self, messages: Sequence[Message]) -> None:
        """Count messages copied (sent, exported) whose original is still in the DLQ."""
        self.left_beside_copy += len(messages)
        self.left_sequences.extend(m.sequence_number for m in messages)

    def abort(self, text: str) -> None:
        """Stop taking new messages; what is in flight finishes, the rest is released."""
        self.error(text)
        if self.aborted is None:
            self.aborted = text
