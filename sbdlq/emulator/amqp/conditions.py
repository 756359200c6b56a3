"""sbdlq errors as AMQP error conditions and management status codes.

The conditions are the ones azure-servicebus maps to its exception classes
(_transport/_pyamqp_transport.py `_ERROR_CODE_TO_ERROR_MAPPING`): amqp:not-found becomes
MessagingEntityNotFoundError, com.microsoft:message-lock-lost MessageLockLostError, and so on.
"""

from __future__ import annotations

from dataclasses import dataclass

from sbdlq import errors
from sbdlq.emulator.engine.errors import (
    EntityExists,
    MessageTooLarge,
    NoSessionAvailable,
    SessionCannotBeLocked,
    SessionLockLost,
)

NOT_FOUND = "amqp:not-found"
UNAUTHORIZED = "amqp:unauthorized-access"
NOT_ALLOWED = "amqp:not-allowed"
NOT_IMPLEMENTED = "amqp:not-implemented"
INTERNAL = "amqp:internal-error"
DECODE = "amqp:decode-error"
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"
LOCK_LOST = "com.microsoft:message-lock-lost"
MESSAGE_NOT_FOUND = "com.microsoft:message-not-found"
ENTITY_DISABLED = "com.microsoft:entity-disabled"
ARGUMENT_ERROR = "com.microsoft:argument-error"
ARGUMENT_OUT_OF_RANGE = "com.microsoft:argument-out-of-range"
SERVER_BUSY = "com.microsoft:server-busy"
DEAD_LETTER = "com.microsoft:dead-letter"
SESSION_LOCK_LOST = "com.microsoft:session-lock-lost"
SESSION_CANNOT_BE_LOCKED = "com.microsoft:session-cannot-be-locked"
TIMEOUT = "com.microsoft:timeout"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"  # the SDK's MessageSizeExceededError
ENTITY_EXISTS = "com.microsoft:entity-already-exists"

LOCK_LOST_TEXT = (
    "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."
)


@dataclass(frozen=True, slots=True)
class Failure:
    """An error as the wire carries it: condition, text and the management status code."""

    condition: str
    description: str
    status: int


# Most specific first: LockLost and friends are OperationFailed subclasses.
_TABLE: list[tuple[type[BaseException], str, int]] = [
    (SessionLockLost, SESSION_LOCK_LOST, 410),
    (SessionCannotBeLocked, SESSION_CANNOT_BE_LOCKED, 409),
    (NoSessionAvailable, TIMEOUT, 408),
    (errors.EntityNotFound, NOT_FOUND, 404),
    (errors.LockLost, LOCK_LOST, 410),
    (errors.MessageNotFound, MESSAGE_NOT_FOUND, 404),
    (errors.EntityDisabled, ENTITY_DISABLED, 403),
    (errors.QuotaExceeded, RESOURCE_LIMIT, 403),
    (MessageTooLarge, MESSAGE_SIZE_EXCEEDED, 400),
    (EntityExists, ENTITY_EXISTS, 409),
    (errors.InvalidOperation, NOT_ALLOWED, 400),
    (errors.BadInput, ARGUMENT_ERROR, 400),
    (errors.AuthError, UNAUTHORIZED, 401),
    (errors.TransientError, SERVER_BUSY, 503),
    (errors.ServiceUnavailable, SERVER_BUSY, 503),
]


def failure_of(exc: BaseException) -> Failure:
    """The condition, description and status code an exception becomes on the wire."""
    for kind, condition, status in _TABLE:
        if isinstance(exc, kind):
            text = exc.line() if isinstance(exc, errors.SbdlqError) else str(exc)
            return Failure(condition, text, status)
    return Failure(INTERNAL, f"internal error: {type(exc).__name__}: {exc}", 500)


def lock_lost() -> Failure:
    """The failure for a settlement whose lock is gone."""
    return Failure(LOCK_LOST, LOCK_LOST_TEXT, 410)


def session_lock_lost(session_id: str) -> Failure:
    """The failure for a settlement through a session whose lock is gone."""
    return failure_of(SessionLockLost(session_id))


def session_wait_timeout(wait_s: float) -> Failure:
    """The failure for a next-available session receiver that no session freed up for in time."""
    text = f"The operation did not complete within the allotted timeout of {wait_s:g} s: no session is available."
    return Failure(TIMEOUT, text, 408)
