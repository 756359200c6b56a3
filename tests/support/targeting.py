"""A change injected into a targeted run at a chosen moment: right after the check of chunk N passed.

The run checks the topic before each chunk (operations/target_watch.py), the check for the next
chunk beginning as soon as a send ends; a change made from a progress tick would race that check.
Injected right after the Nth check returned, the change is certain to come before chunk N is
sent and after the check that let it go: the chunk goes out under the change, and the next check
must see it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sbdlq.operations import target_watch


def after_check(monkeypatch: pytest.MonkeyPatch, n: int, inject: Callable[[], Awaitable[None]]) -> list[Any]:
    """Run `inject` right after the Nth pre-chunk check passed; returns every check's answer."""
    real = target_watch.TargetWatch.lost
    answers: list[Any] = []

    async def lost(self: target_watch.TargetWatch, **kwargs: Any) -> str | None:
        stop = await real(self, **kwargs)
        answers.append(stop)
        if len(answers) == n and stop is None:
            await inject()
        return stop

    monkeypatch.setattr(target_watch.TargetWatch, "lost", lost)
    return answers
