"""How a schedule of many messages is cut into the SDK's schedule requests.

`ServiceBusSender.schedule_messages` takes one time for all its messages, and sends them in one
management request, which the broker takes only up to its message size (256 KB on Standard):
so one request per run of messages that share a time, cut again before REQUEST_BYTES.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sbdlq.backends.servicebus.conversion import to_sdk_message
from sbdlq.backends.servicebus.errors import describe
from sbdlq.backends.servicebus.senders import unconfirmed
from sbdlq.errors import BadInput, SbdlqError, SendUnconfirmed
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from sbdlq.addresses import EntityPath
    from sbdlq.backends.servicebus.shortcuts import SdkShims

#: Bodies per schedule request, at most (a message larger than this goes alone).
REQUEST_BYTES = 192 * 1024
#: What a message costs in a request besides its body: properties, annotations, encoding.
OVERHEAD_BYTES = 1024


def request_runs(messages: Sequence[OutboundMessage], times: Sequence[datetime]) -> list[tuple[int, int]]:
    """[start, end) index ranges: equal times each, bodies within REQUEST_BYTES."""
    runs: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, m in enumerate(messages):
        cost = len(m.body) + OVERHEAD_BYTES
        if i > start and (times[i] != times[start] or size + cost > REQUEST_BYTES):
            runs.append((start, i))
            start, size = i, 0
        size += cost
    if start < len(messages):
        runs.append((start, len(messages)))
    return runs


class Scheduling:
    """Schedule copies and cancel them: a mixin of ServiceBusBackend, on its senders (senders.py)."""

    _sdk: SdkShims

    # The backend's own, declared for the type checker (ServiceBusBackend and Sending define each).
    _guard: Callable[..., Awaitable[Any]]
    _with_sender: Callable[[EntityPath, Callable[[Any, str], Awaitable[None]] | None], Coroutine[Any, Any, None]]

    async def schedule(
        self, entity: EntityPath, messages: Sequence[OutboundMessage], times: Sequence[datetime]
    ) -> list[int]:
        """One schedule request per run of equal times, cut by size (scheduling.request_runs).

        A schedule request is a send: made on the senders' client (no SDK retry) and never
        repeated; one without an answer raises SendUnconfirmed with the sequence numbers of the
        copies scheduled before it, so a spread records those and leaves the rest to the run.
        """
        if entity.is_subscription:
            raise BadInput(f"cannot schedule on subscription {entity}", hint="schedule on its topic")
        if len(messages) != len(times):
            raise ValueError("one time per message")
        numbers: list[int] = []
        for i, j in request_runs(messages, times):
            run = [to_sdk_message(m, self._sdk) for m in messages[i:j]]

            async def one(sender: Any, what: str, run: list[Any] = run, at: datetime = times[i]) -> None:
                try:
                    numbers.extend(await self._guard(sender.schedule_messages(run, at), what))
                except SbdlqError as exc:
                    # SendUnconfirmed unless the broker refused it (then this request took nothing).
                    raise unconfirmed(exc, what, sent=len(numbers), count=len(run)) from exc

            try:
                await self._with_sender(entity, one)
            except SendUnconfirmed as exc:
                exc.sequence_numbers = tuple(numbers)
                raise
            except SbdlqError as exc:
                if not numbers:
                    raise
                # The sender failed to open for a later request: the earlier ones were scheduled.
                done = SendUnconfirmed(
                    f"schedule on {describe(entity)}: {exc.message} after {len(numbers)} copy(ies) were scheduled",
                    sent=len(numbers),
                    unknown=0,
                )
                done.sequence_numbers = tuple(numbers)
                raise done from exc
        return numbers

    async def cancel_scheduled(self, entity: EntityPath, sequence_numbers: Sequence[int]) -> None:
        if not sequence_numbers:
            return
        numbers = list(sequence_numbers)

        async def cancel(sender: Any, what: str) -> None:
            await self._guard(sender.cancel_scheduled_messages(numbers), what)

        await self._with_sender(entity, cancel)
