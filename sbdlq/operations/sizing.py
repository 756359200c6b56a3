"""How many messages to ask the broker for, bounded by the body sizes seen so far.

Premium entities take messages up to 100 MB: a receive or a peek of `--batch-size` 100 such
messages would hold 10 GB. A loop asks for at most `large` messages (a run's --concurrency)
until the bodies it has seen say they are small, and again as soon as a large one shows up;
small bodies are asked for by the page, up to BATCH_BYTES of them. The estimate is the largest
body of the last batch, decaying by half per batch, so a DLQ that just held large messages is
read carefully for a few more batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sbdlq.messages import Message  # annotations only: `count` makes no Message

#: A body this big or bigger is "large": at most `large` of them are asked for at once.
LARGE_BODY_BYTES = 1024 * 1024
#: Roughly the most body bytes a batch of small messages is asked for at once.
BATCH_BYTES = 32 * 1024 * 1024


class BatchSizer:
    """The next batch's message count: up to `limit`, at most `large` while bodies are large."""

    def __init__(self, limit: int, large: int) -> None:
        self.limit = max(1, limit)
        self.large = max(1, min(large, self.limit))
        #: the largest body seen lately, in bytes (None before the first batch)
        self.estimate: int | None = None

    def next_count(self) -> int:
        """How many messages the next receive or peek may ask for."""
        estimate = self.estimate
        if estimate is None or estimate >= LARGE_BODY_BYTES:
            return self.large
        return max(self.large, min(self.limit, BATCH_BYTES // max(estimate, 1)))

    def seen(self, messages: Sequence[Message]) -> None:
        """Learn from a batch's bodies."""
        if not messages:
            return
        biggest = max(len(m.body) for m in messages)
        self.estimate = biggest if self.estimate is None else max(biggest, self.estimate // 2)
