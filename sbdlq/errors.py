"""Errors sbdlq raises and the exit statuses they map to (DESIGN §4).

Backends translate driver errors (sqlite3, azure SDK, AMQP) into these at the edge, so
nothing above a backend ever sees a foreign exception.
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    THRESHOLD = 3
    NOT_FOUND = 4
    AUTH = 5
    UNAVAILABLE = 6
    INTERRUPTED = 130
    TERMINATED = 143  # 128 + SIGTERM


class SbdlqError(Exception):
    """Base error: carries the exit status and a one-line message for stderr."""

    exit_status: ExitStatus = ExitStatus.FAILED

    def __init_subclass__(cls, exit_status: ExitStatus | None = None, **kwargs: object) -> None:
        # A family's exit status is named in its class line; subclasses inherit it.
        super().__init_subclass__(**kwargs)
        if exit_status is not None:
            cls.exit_status = exit_status

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def line(self) -> str:
        """The single line printed on stderr."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class OperationFailed(SbdlqError, exit_status=ExitStatus.FAILED):
    """Some of the work could not be done (exit 1)."""


class Declined(OperationFailed):
    """The person at the terminal answered no to a confirmation: nothing was done (exit 1, as any
    operation that did not happen; a usage error is a mistake in the command line, which this is not)."""


class Interrupted(SbdlqError, exit_status=ExitStatus.INTERRUPTED):
    """Ctrl-C where the command can say exactly what was left undone (exit 130)."""


class BadInput(SbdlqError, exit_status=ExitStatus.USAGE):
    """Usage errors and invalid values (exit 2)."""


class UnknownTargetKind(BadInput):
    """A target of a kind no code path knows: a new kind added where targets are resolved but
    not to every place that reads the kinds (ARCHITECTURE "How to add ... a backend"), never
    guessed to be another kind (exit 2)."""


class AdminPortUnknown(BadInput):
    """An emulator connection string whose HTTP (admin) port cannot be tied to its AMQP endpoint (exit 2)."""


class ThresholdExceeded(SbdlqError, exit_status=ExitStatus.THRESHOLD):
    """`count --fail-above` tripped (exit 3)."""


class EntityNotFound(SbdlqError, exit_status=ExitStatus.NOT_FOUND):
    """The queue, topic or subscription does not exist (exit 4)."""


class AuthError(SbdlqError, exit_status=ExitStatus.AUTH):
    """Authentication or authorization was refused (exit 5)."""


class ServiceUnavailable(SbdlqError, exit_status=ExitStatus.UNAVAILABLE):
    """The broker could not be reached after retries (exit 6)."""


class TransientError(ServiceUnavailable):
    """A failure worth retrying (timeouts, busy broker, dropped connection)."""


class LockLost(OperationFailed):
    """A message's lock expired or was taken; the message stays in its queue."""


class MessageNotFound(OperationFailed):
    """No message with that lock token or sequence number."""


class InvalidOperation(OperationFailed):
    """The broker refuses the operation (e.g. dead-lettering a DLQ message)."""


class EntityDisabled(OperationFailed):
    """The entity is disabled and refuses the operation."""


class QuotaExceeded(OperationFailed):
    """The entity is full."""


class RuleChanged(OperationFailed):
    """A subscription rule is not the one the caller read: a compare-and-write refused (exit 1)."""


class SendUnconfirmed(OperationFailed):
    """A send stopped part way: its first `sent` messages were accepted, the next `unknown` may
    have reached the broker (their answer was lost with the connection, or never came), and the
    rest were not sent. Never repeated blindly: a copy sent twice is a duplicate nobody counts."""

    def __init__(self, message: str, *, sent: int, unknown: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.sent = sent
        self.unknown = unknown
        #: A schedule's: the sequence numbers the broker gave the first `sent` (a spread records them).
        self.sequence_numbers: tuple[int, ...] = ()
