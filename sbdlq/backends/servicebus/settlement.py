"""Settling in runs: the consecutive deliveries of one receiver completed or abandoned in one
disposition (sdk_compat.settle_run), the rest one by one, and what happens when a run fails.

A mixin of ServiceBusBackend (its held messages, receivers and shortcut policy), kept apart
because the failure rules are the part to read with care: a refused run is done with (the
caller peeks which went), an unanswered one is settled one by one, and one that failed in a
way today's SDK does not fail (the shortcut answering in a new shape) is given up, its
messages counted by a peek, and only those still there settled again, the public way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from sbdlq.addresses import Address
from sbdlq.backends.servicebus import sdk_compat
from sbdlq.backends.servicebus.links import Held, Link, runs_of
from sbdlq.errors import SbdlqError
from sbdlq.models import Message

if TYPE_CHECKING:
    from sbdlq.backends.servicebus.shortcuts import SdkShims, Shortcuts

#: messages per peek request (counting without the admin endpoint, looking what a failed run left)
PEEK_PAGE = 250


class RunSettlement:
    """Complete and abandon of many, in runs where the receiver allows it."""

    _held: dict[str, Held]
    _settling: set[str]
    _receivers: dict[Any, Link]
    _runs_unanswered: bool
    _shortcuts: Shortcuts
    _sdk: SdkShims

    # The backend's own, declared for the type checker (ServiceBusBackend defines each).
    peek: Callable[[Address, int, int], Awaitable[list[Message]]]
    _settle: Callable[[Address, Sequence[Message], str, Callable[[Any, Any], Awaitable[Any]]], Awaitable[list[Message]]]
    _usable: Callable[[Held], bool]
    _guard: Callable[..., Awaitable[Any]]
    _drop: Callable[[dict[Any, Link], Link], Awaitable[None]]
    _say: Callable[[str], None]

    async def _settle_in_runs(
        self, address: Address, messages: Sequence[Message], verb: str, action: Callable[[Any, Any], Awaitable[Any]]
    ) -> list[Message]:
        """Consecutive deliveries of one receiver in one disposition (a run), the others one by
        one (`action`); returns the messages it cannot say were settled."""
        keyed: list[tuple[tuple[Message, Held | None], Link | None, int | None]] = []
        seen: set[str] = set()
        in_runs: dict[Link, bool] = {}  # asked once per receiver: a complete carries up to 500
        for m in messages:
            token = m.lock_token or ""
            if token in seen:
                continue  # given twice: settled once
            held = self._held.get(token)
            link = None if held is None or self._runs_unanswered or not self._usable(held) else held.receiver
            if link is not None and link not in in_runs:
                in_runs[link] = self._takes_runs(link)
            if held is None or link is None or not in_runs[link]:
                keyed.append(((m, None), None, None))
                continue
            seen.add(token)
            keyed.append(((m, held), link, self._run_delivery_id(held)))
        singles, runs = runs_of(keyed)
        tokens = {m.lock_token for m in messages if m.lock_token} - self._settling
        self._settling |= tokens  # renewals leave them out meanwhile (the broker may have them no more)
        try:
            parts = await asyncio.gather(
                self._settle(address, [m for m, _ in singles], verb, action),
                *(self._settle_run(address, link, run, verb, action) for link, run in runs),
            )
        finally:
            self._settling -= tokens
        return [m for part in parts for m in part]

    def _takes_runs(self, link: Link) -> bool:
        """Whether a receiver settles in runs: the shortcut on, and its privates where they were."""
        return self._shortcuts.attempt("settle_runs", lambda: sdk_compat.settles_runs(link.handler), False)

    def _run_delivery_id(self, held: Held) -> int | None:
        """A held message's delivery id for a run; None (settled alone) where runs were given up."""
        return self._shortcuts.attempt("settle_runs", lambda: sdk_compat.run_delivery_id(held.sdk_message), None)

    async def _settle_run(
        self,
        address: Address,
        link: Link,
        run: list[tuple[Message, Held | None]],
        verb: str,
        action: Callable[[Any, Any], Awaitable[Any]],
    ) -> list[Message]:
        """One disposition; refused in part (a lost lock): all returned, settle_recovery.still_in tells which
        went. No answer: one by one (`action`), and so is every later settlement here. Failed
        in a way that leaves unknown whether it went out: what is still there, one by one."""
        messages = [m for m, _ in run]
        sdk_messages = [h.sdk_message for _, h in run if h is not None]  # (never None in a run)
        try:
            async with link.settling:
                await self._guard(sdk_compat.settle_run(link.handler, sdk_messages, verb), str(address))
        except sdk_compat.ShortcutFailed as exc:
            self._shortcuts.fall_back("settle_runs", exc)
            if isinstance(exc, sdk_compat.OutcomeUnknown):
                # The disposition may have gone: settle again only what is still in the queue.
                gone = {m.sequence_number for m in messages} - await self._still_there(address, messages)
                for went in (m for m in messages if m.sequence_number in gone):
                    self._held.pop(went.lock_token or "", None)
                messages = [m for m in messages if m.sequence_number not in gone]
            return await self._settle(address, messages, verb, action)
        except SbdlqError as exc:
            self._say(f"{verb} of {len(messages)} in one disposition failed ({exc.message})")
            try:
                refused = sdk_compat.run_refused(exc.__cause__ or exc)
            except sdk_compat.OutcomeUnknown as unknown:
                self._shortcuts.fall_back("settle_runs", unknown)
                refused = True  # none is settled again: settle_recovery.still_in looks which went
            if not refused:
                # No outcome may mean a broker that does not take ranges.
                self._runs_unanswered = True
                return await self._settle(address, messages, verb, action)
            if not self._sdk.running(link.handler):
                await self._drop(self._receivers, link)
        else:
            messages = []
        for m in run:
            self._held.pop(m[0].lock_token or "", None)  # settled, or answered for: not again
        return messages

    async def _still_there(self, address: Address, messages: Sequence[Message]) -> set[int]:
        """The sequence numbers of messages still in the queue, peeked (every one where a peek fails)."""
        wanted = {m.sequence_number for m in messages}
        seen: set[int] = set()
        at, last = min(wanted), max(wanted)
        try:
            while at <= last:
                page = await self.peek(address, at, min(PEEK_PAGE, last - at + 1))
                if not page:
                    break
                seen.update(m.sequence_number for m in page)
                at = page[-1].sequence_number + 1
        except SbdlqError:
            return wanted
        return wanted & seen
