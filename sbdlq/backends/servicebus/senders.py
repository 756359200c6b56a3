"""Sending: the cached senders, opened with sbdlq's own retries, and sends that are never repeated.

A mixin of ServiceBusBackend (its client, guard and translation), kept apart because its rule
is the one that keeps a copy from being sent twice. The senders' client never retries (the
SDK would send a batch again after a connection cut that lost only its answer: a duplicate
no summary counts). sbdlq retries what provably sent nothing (opening a sender link, a batch
the broker refused as busy); a send whose answer was lost raises SendUnconfirmed, saying which
copies were accepted and which may have been, and the caller never sends those again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sbdlq.addresses import EntityPath
from sbdlq.backends.servicebus.errors import VERDICTS, describe
from sbdlq.backends.servicebus.links import Link
from sbdlq.backends.servicebus.sdk_compat import transfer_rejected
from sbdlq.errors import (
    AuthError,
    EntityNotFound,
    SbdlqError,
    SendUnconfirmed,
    ServiceUnavailable,
)

if TYPE_CHECKING:
    from sbdlq.backends.servicebus.shortcuts import SdkShims

#: attempts at opening a sender link (the SDK's own default for a call: a try and two retries)
OPEN_ATTEMPTS = 3


class Sending:
    """Send copies through cached senders; what the broker may hold when a send fails is said."""

    _senders: dict[str, Link]
    _wire_doubted: bool
    _wire_failures: int
    _sdk: SdkShims
    _timeout_s: float

    # The backend's own, declared for the type checker (ServiceBusBackend defines each).
    _guard: Callable[..., Awaitable[Any]]
    _drop: Callable[[dict[Any, Link], Link], Awaitable[None]]
    _translate: Callable[[BaseException, str], SbdlqError]
    _sending_client: Callable[[], Any]
    _say: Callable[[str], None]

    async def _send_batches(self, sender: Any, sdk_messages: list[Any], what: str) -> None:
        """Send in as few batches as fit; SendUnconfirmed once a batch's outcome is unknown or a
        later batch fails after earlier ones were accepted."""
        from azure.servicebus.exceptions import MessageSizeExceededError

        sent = 0  # copies the broker accepted, in order

        async def flush(payload: Any, count: int) -> None:
            nonlocal sent
            try:
                await self._guard(sender.send_messages(payload), what)
            except asyncio.CancelledError:
                raise
            except SbdlqError as exc:
                raise unconfirmed(exc, what, sent=sent, count=count) from exc
            sent += count

        batch = await self._guard(sender.create_message_batch(), what)
        for sdk_message in sdk_messages:
            try:
                batch.add_message(sdk_message)
                continue
            except MessageSizeExceededError:
                pass
            except Exception as exc:
                raise unconfirmed(self._translate(exc, what), what, sent=sent, count=0) from exc
            if len(batch):
                await flush(batch, len(batch))
                try:
                    batch = await self._guard(sender.create_message_batch(), what)
                except SbdlqError as exc:
                    # After copies were accepted: the caller must not send this call's copies again.
                    raise unconfirmed(exc, what, sent=sent, count=0) from exc
            try:
                batch.add_message(sdk_message)
            except MessageSizeExceededError:
                # A batch holds at most 1 MB even where the entity takes 100 MB (Premium):
                # a larger message goes alone, and the SDK checks it against the link's limit
                # (InvalidOperation, as the emulator backend says it, when the entity refuses it).
                await flush(sdk_message, 1)
        if len(batch):
            await flush(batch, len(batch))

    async def _with_sender(self, entity: EntityPath, act: Callable[[Any, str], Awaitable[None]] | None) -> None:
        """Open the entity's cached sender if need be, then act on it (send, schedule, cancel;
        None: only open), one call at a time.

        A sender the SDK shut down, or whose call was cut short, is closed and replaced, so
        no later call inherits a half-torn-down handler.
        """
        key = str(entity)
        what = describe(entity)
        failed_opens = 0
        while True:
            link = self._senders.get(key)
            if link is None:
                link = self._senders[key] = Link(key, self._new_sender(entity))
            async with link.lock:
                if self._senders.get(key) is not link:
                    continue  # replaced while we waited for it
                if self._sdk.half_torn(link.handler) or (link.opened and link.epoch < self._wire_failures):
                    # Opened before the wire last failed: its connection may be dead unnoticed, and a
                    # send on it would be one whose outcome is unknown. Opening sends nothing.
                    await self._drop(self._senders, link)
                    continue
                if not link.opened:
                    error = await self._open_sender(link, what)
                    if error is not None:
                        await self._drop(self._senders, link)
                        failed_opens += 1
                        if failed_opens >= OPEN_ATTEMPTS or not _worth_reopening(error):
                            raise error
                        self._say(f"opening the sender of {what} failed ({error.message}): trying again")
                        await asyncio.sleep(min(2.0, self._timeout_s / 20) * 2 ** (failed_opens - 1))
                        continue
                if act is None:
                    return
                try:
                    await act(link.handler, what)
                except BaseException as exc:
                    if isinstance(exc, SendUnconfirmed) and exc.unknown:
                        self._wire_doubted = True
                    if _sender_broken(self._sdk.running(link.handler), exc):
                        await self._drop(self._senders, link)
                    raise
                return

    async def _open_sender(self, link: Link, what: str) -> SbdlqError | None:
        """Attach a sender link (nothing is sent): the error that stopped it, or None when it opened."""
        try:
            # Opening is the first batch: it attaches the link and learns its size limit. A third
            # of the budget per attempt: OPEN_ATTEMPTS of them fit in about one --timeout.
            await self._guard(link.handler.create_message_batch(), what, timeout=self._timeout_s / OPEN_ATTEMPTS)
        except SbdlqError as exc:
            return exc
        link.opened = True
        link.epoch = self._wire_failures
        return None

    def _new_sender(self, entity: EntityPath) -> Any:
        from sbdlq.backends.servicebus.clients import SOCKET_TIMEOUT_S

        try:
            # A queue sender and a topic sender differ only in name: both target the entity path.
            sender = self._sending_client().get_queue_sender(entity.name, socket_timeout=SOCKET_TIMEOUT_S)
            return self._sdk.prepared(sender)
        except SbdlqError:
            raise
        except Exception as exc:
            raise self._translate(exc, describe(entity)) from exc


def _worth_reopening(error: SbdlqError) -> bool:
    """Whether a sender that failed to open may open on another try: the wire, not a refusal."""
    return isinstance(error, ServiceUnavailable) and not isinstance(error, (AuthError, EntityNotFound))


def _refused(error: SbdlqError) -> bool:
    """Whether the broker answered no to a send: then it took none of the batch's messages.

    Only an explicit answer counts: a rejected outcome of the transfer (pyamqp's MessageException
    carrying the broker's condition) or "busy". The same verdicts (unauthorized, not found,
    disabled) also arrive when the broker closes the link or the connection while a transfer
    awaits its answer: then the transfer may have been taken, and the copies are unknown. (A
    refusal on attach is said by _open_sender, before anything is sent: never through here.)
    """
    from azure.servicebus.exceptions import MessageSizeExceededError, ServiceBusServerBusyError

    cause = error.__cause__
    if isinstance(cause, (ServiceBusServerBusyError, MessageSizeExceededError)):
        return True  # busy is an answer (a retry sends nothing twice); too large: the SDK's own check
    return isinstance(error, VERDICTS) and transfer_rejected(getattr(cause, "inner_exception", None))


def unconfirmed(error: SbdlqError, what: str, *, sent: int, count: int) -> SbdlqError:
    """What a failed batch (or schedule request) of `count` after `sent` accepted copies means for the caller.

    Refused by the broker: nothing of this batch went (the error as it is when none went before).
    Anything else: this batch may be on the broker (SendUnconfirmed, never to be sent again).
    """
    unknown = 0 if _refused(error) else count
    if not sent and not unknown:
        return error
    if unknown:
        text = f"send to {what}: no answer ({error.message}): {unknown} copy(ies) may have reached it"
    else:
        text = f"send to {what}: {error.message} after {sent} copy(ies) were accepted"
    return SendUnconfirmed(text, sent=sent, unknown=unknown)


def _sender_broken(running: bool, exc: BaseException) -> bool:
    """Whether a sender must be replaced after exc: the SDK shut it down, or a send was cut short.

    A send cancelled inside its socket write may have gone out without the SDK counting its
    delivery-id, so the next one would repeat it. (Receivers are replaced only once the SDK
    shut them down: a new one would lose every lock the old one holds.)
    """
    cause = exc.__cause__ if isinstance(exc, SbdlqError) else exc
    if isinstance(exc, asyncio.CancelledError) or isinstance(cause, (TimeoutError, asyncio.CancelledError)):
        return True
    if isinstance(exc, SendUnconfirmed) and exc.unknown:
        return True  # its link may hold deliveries the broker never answered
    return not running
