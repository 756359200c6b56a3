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
    #: of those, the ones whose copy's send got no answer (never completed by the run)
    unconfirmed_sequences: set[int] = field(default_factory=set)
    #: why the originals left beside their copy could not be checked at the end (None: they were)
    unchecked_reason: str | None = None
    #: the error lines that said originals stayed (see stayed)
    stayed_lines: list[str] = field(default_factory=list)
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

    def left_beside(self, messages: Sequence[Message], *, unconfirmed: bool = False) -> None:
        """Count messages copied (sent, exported) whose original is still in the DLQ
        (`unconfirmed`: the send of their copy got no answer)."""
        self.left_beside_copy += len(messages)
        self.left_sequences.extend(m.sequence_number for m in messages)
        if unconfirmed:
            self.unconfirmed_sequences.update(m.sequence_number for m in messages)

    def stayed(self, text: str) -> None:
        """An error line saying that originals stayed beside their copy (taken back by gone_after_all)."""
        self.error(text)
        self.stayed_lines.append(text)

    def gone_after_all(self, sequences: set[int]) -> None:
        """Originals counted as left beside their copy that a check found gone: their complete's
        answer was lost, not the complete. They were moved (or deleted) after all."""
        gone = [s for s in self.left_sequences if s in sequences]
        if not gone:
            return
        self.left_sequences = [s for s in self.left_sequences if s not in sequences]
        self.left_beside_copy -= len(gone)
        self.handled += len(gone)
        # The lines that said they stayed are not true any more; the summary says what is left.
        self.errors = [e for e in self.errors if e not in self.stayed_lines]

    def abort(self, text: str) -> None:
        """Stop taking new messages; what is in flight finishes, the rest is released."""
        self.error(text)
        if self.aborted is None:
            self.aborted = text
