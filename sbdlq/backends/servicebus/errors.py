"""SDK, azure-core and network errors → sbdlq.errors, at the backend's edge.

Nothing above the backend sees an azure exception: every SDK call goes through `guarded` (or
`translate_error` directly).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sbdlq.addresses import EntityPath
from sbdlq.backends.servicebus.sdk_compat import ShortcutFailed, error_condition
from sbdlq.connstr import redact
from sbdlq.errors import (
    AuthError,
    BadInput,
    EntityDisabled,
    EntityNotFound,
    InvalidOperation,
    LockLost,
    MessageNotFound,
    OperationFailed,
    QuotaExceeded,
    SbdlqError,
    ServiceUnavailable,
    TransientError,
)

T = TypeVar("T")


async def guarded(awaitable: Awaitable[T], limit: float, translate: Callable[[Exception], SbdlqError]) -> T:
    """Await an SDK call within limit seconds (inf: no limit), translating whatever it raises
    (a shortcut's own failure goes up as it is, for the backend to give the shortcut up)."""
    try:
        if math.isinf(limit):
            return await awaitable
        return await asyncio.wait_for(awaitable, limit)
    except (SbdlqError, ShortcutFailed):
        raise
    except Exception as exc:
        raise translate(exc) from exc


def describe(entity: EntityPath) -> str:
    """How messages name an entity: `subscription t/Subscriptions/s`, or a queue's or topic's path."""
    return f"subscription {entity}" if entity.is_subscription else f"{entity!s}"


def translate_error(
    exc: BaseException,
    *,
    host: str,
    what: str,
    timeout_s: float,
    emulator: bool = False,
    hint: str | None = None,
) -> SbdlqError:
    """The sbdlq error for anything the SDK, azure-core or the network raised."""
    if isinstance(exc, SbdlqError):
        return exc
    from azure.core import exceptions as core
    from azure.servicebus import exceptions as sb

    detail = first_line(exc)
    condition = error_condition(exc)
    said = _broker_words(detail)
    # Before the SDK-glitch check: the SDK reports a refused token with condition
    # amqp:client-error, which would otherwise read as a link to retry.
    refused = _refusal(exc, host=host, what=what, detail=detail, condition=condition)
    if refused is not None:
        return refused
    if _sdk_internal(exc, condition):
        # The SDK's handler broke under the call (torn down by another call's error, a link
        # no longer attached): nothing the broker said about it; a new link may well work.
        return TransientError(f"{what}: the SDK's link to {host} was reset ({said})", hint="try again")
    if isinstance(exc, (sb.MessageLockLostError, sb.SessionLockLostError)):
        return LockLost(f"lock lost on {what}: {detail}")
    if isinstance(exc, (sb.MessagingEntityNotFoundError, core.ResourceNotFoundError)):
        return EntityNotFound(f"{what} not found in {host}", hint=hint)
    if isinstance(exc, core.HttpResponseError):
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            return _auth_error(host, what, detail)
        if status == 404:
            return EntityNotFound(f"{what} not found in {host}", hint=hint)
        if status in (429, 503):
            return TransientError(f"{host} is busy ({status}); try again shortly")
        return OperationFailed(f"{what}: {detail}")
    if isinstance(exc, sb.ServiceBusServerBusyError):
        return TransientError(f"{host} is busy: {detail}", hint="try again shortly")
    if isinstance(
        exc,
        (
            sb.ServiceBusConnectionError,
            sb.ServiceBusCommunicationError,
            sb.OperationTimeoutError,
            core.ServiceRequestError,
            core.ServiceResponseError,
            # TimeoutError covers asyncio's and concurrent.futures'; OSError covers refused
            # connections, resets and DNS failures (socket.gaierror).
            TimeoutError,
            OSError,
        ),
    ):
        return _unreachable(host, timeout_s, emulator, cause=network_cause(exc))
    if isinstance(exc, sb.MessageNotFoundError):
        return MessageNotFound(f"{what}: {detail}")
    if isinstance(exc, sb.MessagingEntityDisabledError):
        # The broker's own words name the entity, as the emulator backend reports it.
        return EntityDisabled(said)
    if isinstance(exc, sb.ServiceBusQuotaExceededError):
        return QuotaExceeded(f"{what} is full: {detail}")
    if isinstance(exc, (sb.MessageSizeExceededError, sb.MessageAlreadySettled, sb.SessionCannotBeLockedError)):
        return InvalidOperation(f"{what}: {detail}")
    # The SDK raises a plain ServiceBusError for these: the condition tells a refusal of this
    # operation or message (dead-lettering a DLQ message, no session id for a session
    # entity) from a failure, as the emulator backend raises them.
    if condition in _REFUSED:
        return InvalidOperation(said)
    if condition in _BAD_ARGUMENT:
        return BadInput(said)
    return OperationFailed(f"{what}: {detail}")


# AMQP error conditions (azure-servicebus _common/constants.py, AMQP 1.0 §2.8.15).
_REFUSED = frozenset({"amqp:not-allowed", "amqp:not-implemented"})
_BAD_ARGUMENT = frozenset({"com.microsoft:argument-error", "com.microsoft:argument-out-of-range", "amqp:decode-error"})
# The broker's refusal of a link or request for want of rights (a missing Listen/Send claim).
_UNAUTHORIZED = "amqp:unauthorized-access"
# Raised by the SDK itself when its handler is no longer usable.
_CLIENT_ERROR = "amqp:client-error"
# Errors that are the broker's answer about the message or operation itself (not about the
# link that carried it).
VERDICTS = (InvalidOperation, BadInput, MessageNotFound, EntityDisabled, QuotaExceeded, EntityNotFound, AuthError)
_SDK_SUFFIX = re.compile(r"(?:\s*Error condition: \S+?\.)?(?:\s*Status Code: \S+?\.)?\s*$")


def _broker_words(detail: str) -> str:
    """The broker's error description, without the suffixes the SDK appends to it."""
    return _SDK_SUFFIX.sub("", detail) or detail


def _sdk_internal(exc: BaseException, condition: str | None) -> bool:
    """Whether exc is the SDK failing inside its own handler rather than a broker's answer."""
    if condition == _CLIENT_ERROR:
        return True
    # "Unexpected error occurred (...). Handler shutting down.": the SDK wraps anything that
    # is not an AMQP error this way, and closes the handler; a handler already torn down
    # shows as None where its session or link was.
    inner = getattr(exc, "inner_exception", None)
    if str(exc).startswith("Handler failed:") and isinstance(inner, (AttributeError, TypeError, IndexError)):
        return True
    return isinstance(exc, AttributeError) and str(exc).startswith("'NoneType' object has no attribute")


def _unreachable(host: str, timeout_s: float, emulator: bool, *, cause: str | None = None) -> ServiceUnavailable:
    """What stopped us reaching host: a name that did not resolve, a refusal, or the clock; on an
    azure-servicebus release sbdlq does not support, that release first (it may be the cause:
    one without `UseDevelopmentEmulator` dials TLS on 5671)."""
    from . import shortcuts

    version = shortcuts.sdk_version()
    if shortcuts.unsupported(version):
        return ServiceUnavailable(
            f"cannot reach {host} with azure-servicebus {version}: sbdlq supports releases {shortcuts.SUPPORTED_RANGE}",
            hint=f"pip install '{shortcuts.SUPPORTED_PIN}'",
        )
    hint = (
        f"is the emulator running (sbdlq emulator serve) on {host}?"
        if emulator
        else "check the namespace name, the network and firewalls (AMQP 5671, HTTPS 443), or raise --timeout"
    )
    if cause == "resolve":
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        return ServiceUnavailable(
            f"cannot resolve {name}", hint="check the host name in the target" if not emulator else hint
        )
    if cause == "refused":
        return ServiceUnavailable(f"cannot reach {host}: connection refused", hint=hint)
    if cause == "timeout":
        return ServiceUnavailable(f"cannot reach {host}: timed out after {timeout_s:g}s", hint=hint)
    return ServiceUnavailable(f"cannot reach {host} after {timeout_s:g}s", hint=hint)


# Words of the resolver and of a refused connect, for causes that reach us only as text
# (an SDK that wraps the socket error in a string).
_UNRESOLVED_WORDS = re.compile(
    r"Name or service not known|nodename nor servname|Temporary failure in name resolution|getaddrinfo failed"
    r"|Failed to resolve|No address associated with hostname",
    re.IGNORECASE,
)
_REFUSED_WORDS = re.compile(r"\[Errno 111\]|Connection refused|Connect call failed|actively refused", re.IGNORECASE)


def network_cause(exc: BaseException) -> str | None:
    """`resolve`, `refused`, `timeout` or None (not known) from exc and what it wraps."""
    import socket

    seen: set[int] = set()
    link: BaseException | None = exc
    texts = []
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, socket.gaierror):
            return "resolve"
        if isinstance(link, ConnectionRefusedError):
            return "refused"
        if isinstance(link, TimeoutError):
            return "timeout"
        texts.append(str(link))
        inner = getattr(link, "inner_exception", None)
        link = inner if isinstance(inner, BaseException) else (link.__cause__ or link.__context__)
    text = " ".join(texts)
    if _UNRESOLVED_WORDS.search(text):
        return "resolve"
    if _REFUSED_WORDS.search(text):
        return "refused"
    return None


def _refusal(exc: BaseException, *, host: str, what: str, detail: str, condition: str | None) -> AuthError | None:
    """AuthError when the broker or the identity provider refused who we are or what we may do."""
    from azure.core import exceptions as core
    from azure.servicebus import exceptions as sb

    # The SDK wraps what failed inside its handler (a credential's ClientAuthenticationError
    # while putting the token on $cbs, say): look at what it wraps too.
    sources = (exc, getattr(exc, "inner_exception", None))
    if any(isinstance(e, sb.ServiceBusAuthenticationError) for e in sources):
        # A key or SAS token that $cbs refused (401): the SDK's words say nothing more.
        return AuthError(f"authentication failed for {host}", hint="check the key / role")
    for source in sources:
        if isinstance(source, core.ClientAuthenticationError) and getattr(source, "status_code", None) is None:
            # No token at all: the credential (DefaultAzureCredential, ...) says why. (With a
            # status code it is the admin endpoint's 401, which may mean a key without Manage.)
            return AuthError(
                f"authentication failed for {host}: {first_line(source)}",
                hint="check the credential (run `az login` for DefaultAzureCredential) / role",
            )
    if isinstance(exc, (sb.ServiceBusAuthorizationError, core.ClientAuthenticationError)) or condition == _UNAUTHORIZED:
        return _auth_error(host, what, detail)
    return None


def _auth_error(host: str, what: str, detail: str) -> AuthError:
    return AuthError(
        f"not authorized for {what} on {host}: {detail}",
        hint="check the key name and key (Listen, Send and Manage rights as needed), or the identity's "
        "Azure Service Bus Data Owner/Receiver/Sender role; run `az login` for DefaultAzureCredential",
    )


def first_line(exc: BaseException) -> str:
    """A redacted, single-line, bounded description of an exception."""
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else ""
    line = redact(line) or type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."
