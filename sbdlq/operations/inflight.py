"""How many requests to keep in flight: enough to cover the measured round trip, never more than a cap."""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable

#: gaps between answers remembered for the measure of a request's cost
_KEPT = 8


class Window:
    """The number of requests to have in flight, from what the answers so far measured.

    One request alone first: its round trip is the first measure. Then two, so that the gap
    between their answers shows what one request costs where the work is done (the broker's
    time, or the client's). The window is then the round trip over that cost, plus one: just
    enough that an answer is always on its way, so a far namespace's latency is hidden without
    piling requests on a broker that is already busy. It at most doubles at each answer and
    never exceeds `cap` (the user's --concurrency). With a backend that answers at once there
    is no round trip to hide: the cap is 1.
    """

    def __init__(self, cap: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.cap = max(1, cap)
        self.size = 1
        self._clock = clock
        #: the shortest round trip seen: the link's own, without the wait behind other requests
        self._round_trip: float | None = None
        self._gaps: deque[float] = deque(maxlen=_KEPT)
        self._last_answer: float | None = None

    def now(self) -> float:
        """The clock requests are timed by (the time a request is sent)."""
        return self._clock()

    def answered(self, sent_at: float, still_in_flight: int) -> None:
        """Take the measures of one answer: its round trip, and its gap after the previous one."""
        now = self._clock()
        trip = now - sent_at
        self._round_trip = trip if self._round_trip is None else min(self._round_trip, trip)
        if self._last_answer is not None:
            # This request was in flight when the previous answer came: the gap is what one
            # request costs where the work is done.
            self._gaps.append(now - self._last_answer)
        self._last_answer = now if still_in_flight > 0 else None
        self.size = min(self.cap, 2 * self.size, self._wanted())

    def _wanted(self) -> int:
        if not self._gaps or self._round_trip is None:
            return 2  # a second request, to measure the gap
        cost = max(statistics.median(self._gaps), self._round_trip / self.cap, 1e-6)
        return math.ceil(self._round_trip / cost) + 1
