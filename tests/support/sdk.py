"""Shorthands for the tests that drive the unmodified azure-servicebus SDK (sync) against `emulator serve`."""

from __future__ import annotations

from typing import Any

#: How long a receive may wait for messages that are already there. The SDK returns as soon as
#: they came (0.2 s after the first), so this costs nothing unless the machine is slow, and a
#: busy machine can take longer than a second to carry a message across.
WAIT = 30.0
#: How long a receive, or a next-available session receiver, waits where nothing is to come:
#: the test waits it out every time, so it stays short (a late message is not what those test).
NOTHING_WAIT = 1.0


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
