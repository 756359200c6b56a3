"""Renewing the locks of held messages, per receiver and per message (a mixin of ServiceBusBackend).

Kept apart for its failure rules: a message settled, or being settled, while its renewal waited
for the link is left out (the SDK refuses to renew it, and in a batch renewal the broker's
"lock lost" for it would fail the others'); one message's lost lock or refusal is that message's
alone; receivers renew at once. A transient failure still fails the call (the caller retries).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sbdlq.addresses import Address
from sbdlq.backends.servicebus import sdk_compat
from sbdlq.backends.servicebus.links import Held, Link, lock_token
from sbdlq.errors import InvalidOperation, LockLost
from sbdlq.models import Message

if TYPE_CHECKING:
    from sbdlq.backends.servicebus.shortcuts import Shortcuts


class LockRenewal:
    """renew_locks of ServiceBusBackend."""

    _held: dict[str, Held]
    _settling: set[str]
    _shortcuts: Shortcuts

    # The backend's own, declared for the type checker (ServiceBusBackend defines each).
    _usable: Callable[[Held], bool]
    _on_receiver: Callable[..., Awaitable[Any]]

    async def renew_locks(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        """Renew the locks, one request per receiver (receivers at once); updates locked_until.

        Per message: one settled while its renewal waited (the SDK says "already settled"), or
        whose lock is lost, costs only itself; the others are renewed all the same.
        """
        what = str(address)
        groups: dict[Link, list[tuple[Message, Held]]] = {}
        lost: set[int] = set()
        for message in messages:
            token = lock_token(message, "renew", what)
            held = self._held.get(token)
            if held is None or not self._usable(held):
                self._held.pop(token, None)
                lost.add(id(message))
            else:
                groups.setdefault(held.receiver, []).append((message, held))

        async def on_receiver(link: Link, items: list[tuple[Message, Held]]) -> None:
            async with link.lock:
                # Settled (or being settled) while this waited for the link: the SDK refuses to
                # renew it, the broker may no longer have it, and in a batch it would fail the
                # others' renewal. Not renewed, and not reported lost: nobody acts on it again.
                live = [(m, h) for m, h in items if self._renewable(m, h)]
                untils = await self._renew_on(link, [h.sdk_message for _, h in live], what) if live else []
            for (message, held), until in zip(live, untils, strict=True):
                if until is None:
                    self._held.pop(str(message.lock_token), None)
                    lost.add(id(message))
                else:
                    message.locked_until = held.locked_until = until

        outcomes = await asyncio.gather(*(on_receiver(k, v) for k, v in groups.items()), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return [m for m in messages if id(m) in lost]

    def _renewable(self, message: Message, held: Held) -> bool:
        """Whether a message is still held as it was, and no settlement of it is on its way."""
        token = str(message.lock_token)
        return self._held.get(token) is held and token not in self._settling

    async def _renew_on(self, link: Link, sdk_messages: list[Any], what: str) -> list[datetime | None]:
        """New lock expiries (None: lost) of messages held on one receiver; the caller holds its lock."""
        many = len(sdk_messages) > 1
        if many and self._shortcuts.use("renew_many") and not sdk_compat.can_renew_many(link.handler):
            self._shortcuts.fall_back("renew_many", "the receiver has no _renew_locks coroutine")
        if many and self._shortcuts.use("renew_many"):
            try:
                return list(await self._on_receiver(link, sdk_compat.renew_many(link.handler, sdk_messages), what))
            except sdk_compat.Unavailable as exc:
                self._shortcuts.fall_back("renew_many", exc)  # renewing again is harmless
                if not sdk_compat.handler_running(link.handler):
                    # The SDK shut the receiver down as the shortcut failed inside it: its locks
                    # went with its link, so none is kept (nothing is sent for them).
                    return [None] * len(sdk_messages)
            except LockLost:
                pass  # one lost lock fails the whole request: renew one by one to tell them apart
        untils: list[datetime | None] = []
        for sdk_message in sdk_messages:
            untils.append(await self._renew_one(link, sdk_message, what))
        return untils

    async def _renew_one(self, link: Link, sdk_message: Any, what: str) -> datetime | None:
        """One message's new lock expiry; None when its lock cannot be kept (lost, or settled meanwhile)."""
        try:
            return await self._on_receiver(link, link.handler.renew_message_lock(sdk_message), what)
        except (LockLost, InvalidOperation):
            # InvalidOperation: "already settled" (the SDK's own check) or refused for this message
            # alone; either way its lock is not kept, so nothing must be sent for it.
            return None
