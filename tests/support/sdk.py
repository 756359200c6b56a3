"""Shorthands for the tests that drive the unmodified azure-servicebus SDK (sync) against `emulator serve`."""

from __future__ import annotations

from typing import Any

WAIT = 1.0  # seconds a receive waits for messages that are already there


def bodies(messages: list[Any]) -> list[str]:
    """The messages' bodies as text."""
    return [b"".join(m.body).decode() for m in messages]


def drain(receiver: Any, expected: int) -> list[Any]:
    """Receive until `expected` messages arrived (or the waits run dry)."""
    got: list[Any] = []
    for _ in range(expected + 2):
        batch = receiver.receive_messages(max_message_count=expected - len(got), max_wait_time=WAIT)
        got.extend(batch)
        if len(got) >= expected or not batch:
            break
    return got
