"""The broker's refusals, named, with the service's wording in one place.

Each is a subclass of the sbdlq error its callers already catch (EntityNotFound,
InvalidOperation, ...), so the exit statuses and AMQP conditions stay what they were.
"""

from __future__ import annotations

from sbdlq.errors import (
    BadInput,
    EntityDisabled,
    EntityNotFound,
    InvalidOperation,
    LockLost,
    MessageNotFound,
    QuotaExceeded,
    TransientError,
)


class EntityMissing(EntityNotFound):
    """No entity at that path."""

    def __init__(self, path: str) -> None:
        super().__init__(self.text(path))

    @staticmethod
    def text(path: str) -> str:
        """The wording, also the description of a forward that found no destination."""
        return f"The messaging entity '{path}' could not be found."


class EntityIsDisabled(EntityDisabled):
    """The entity refuses sends while disabled."""

    def __init__(self, path: str) -> None:
        super().__init__(self.text(path))

    @staticmethod
    def text(path: str) -> str:
        """The wording, also the description of a forward to a disabled destination."""
        return f"Messaging entity '{path}' is currently disabled."


class EntityFull(QuotaExceeded):
    """A queue at its MaxSize."""

    def __init__(self, path: str, max_size: int) -> None:
        super().__init__(self.text(path, max_size))

    @staticmethod
    def text(path: str, max_size: int) -> str:
        """The wording, also the description of a forward to a full destination."""
        return f"The messaging entity '{path}' is full ({max_size} messages)."


class MessageTooLarge(InvalidOperation):
    """A message over the entity's maximum message size (MaxMessageSizeInKilobytes)."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(self.text(size, limit, f"'{path}'"))

    @staticmethod
    def text(size: int, limit: int, where: str = "the link") -> str:
        """The broker's wording (MessageSizeExceededException), also the listener's detach text."""
        return (
            f"The received message (size:{size} bytes) exceeds the limit ({limit} bytes) currently allowed on {where}."
        )


class EntityExists(InvalidOperation):
    """Creating an entity that exists, without exist_ok."""

    def __init__(self, path: str) -> None:
        super().__init__(f"The messaging entity '{path}' already exists.")


class RuleExists(EntityExists):
    """Adding a rule whose name the subscription already has."""

    def __init__(self, subscription: str, name: str) -> None:
        InvalidOperation.__init__(self, f"The messaging entity '{subscription}/Rules/{name}' already exists.")


class RuleMissing(EntityNotFound):
    """No rule of that name on the subscription."""

    def __init__(self, subscription: str, name: str) -> None:
        super().__init__(f"The messaging entity '{subscription}/Rules/{name}' could not be found.")


class SendToSubscription(InvalidOperation):
    """Subscriptions are fed by their topic only."""

    def __init__(self, path: str) -> None:
        super().__init__(f"Cannot send to subscription '{path}': send to its topic.")


class SessionIdMissing(InvalidOperation):
    """A message without a session id sent to a session-enabled queue."""

    def __init__(self) -> None:
        super().__init__(
            "The SessionId was not set on a message, and it cannot be sent to the entity. "
            "Entities that have session support enabled can only receive messages that have "
            "the SessionId set to a valid value."
        )


class AlreadyDeadLettered(InvalidOperation):
    """Dead-lettering from a dead-letter queue."""

    def __init__(self) -> None:
        super().__init__("Cannot dead-letter a message that is already in a dead-letter queue.")


class NotDeferred(MessageNotFound):
    """receive_deferred named a message that isn't deferred here."""

    def __init__(self, seq: int) -> None:
        super().__init__(f"Failed to lock one or more specified messages: {seq} is not deferred.")


class DeferredLocked(MessageNotFound):
    """receive_deferred named a deferred message another receiver holds."""

    def __init__(self, seq: int) -> None:
        super().__init__(f"The deferred message {seq} is locked by another receiver.")


class NoSessionAvailable(TransientError):
    """A session receiver asked for the next session and none has messages."""

    def __init__(self) -> None:
        super().__init__("No sessions are available.")


class SessionCannotBeLocked(InvalidOperation):
    """A receiver asked for a session another receiver holds."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"The requested session '{session_id}' cannot be accepted. It may be locked by another receiver."
        )


class SessionLockLost(LockLost):
    """The session's lock lapsed or another receiver took the session."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"The session lock has expired on the session '{session_id}'. Accept a new session.")


class NotATopic(BadInput):
    """A subscription created under something that isn't a topic."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path!r} is a {kind}, not a topic")


class NotASubscription(BadInput):
    """Rules belong to subscriptions."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path!r} is a {kind}, not a subscription: only subscriptions have rules")


class KindMismatch(BadInput):
    """exist_ok creation of an entity that exists as another kind."""

    def __init__(self, path: str, existing: str, kind: str) -> None:
        super().__init__(f"{path!r} already exists as a {existing}, not a {kind}")


class TopicHasNoCounts(BadInput):
    """Counts asked of a topic."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path!r} is a topic: counts are per subscription")


class TopicNotReadable(BadInput):
    """Receiving or settling on a topic."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path!r} is a topic: read from one of its subscriptions (TOPIC/Subscriptions/SUB)")


class InvalidStatus(BadInput):
    """An entity status other than Active or Disabled."""

    def __init__(self, status: object) -> None:
        super().__init__(f"invalid status {status!r}: Active or Disabled")


class UnknownEntityProperties(BadInput):
    """Entity properties the engine doesn't know."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(f"unknown entity properties: {', '.join(sorted(names))}")


class MaxDeliveryCountTooLow(BadInput):
    """MaxDeliveryCount below 1."""

    def __init__(self) -> None:
        super().__init__("MaxDeliveryCount must be at least 1")


class MaxMessageSizeOutOfRange(BadInput):
    """MaxMessageSizeInKilobytes outside 1 .. 102400 (Premium's 100 MB)."""

    def __init__(self, value: object, ceiling: int) -> None:
        super().__init__(f"MaxMessageSizeInKilobytes must be between 1 and {ceiling}, got {value!r}")


class NotPositive(BadInput):
    """A duration or time to live that is zero or negative (the message names which)."""


_CORRELATION_KNOWN = (
    "ContentType, CorrelationId, Label, MessageId, ReplyTo, ReplyToSessionId, SessionId, To, Properties"
)


class BadCorrelationFilter(BadInput):
    """A correlation filter that isn't an object of known properties."""

    @classmethod
    def not_an_object(cls) -> BadCorrelationFilter:
        return cls("a correlation filter is an object of property names and values")

    @classmethod
    def properties_not_an_object(cls, key: str) -> BadCorrelationFilter:
        return cls(f"correlation filter {key!r} must be an object of application properties")

    @classmethod
    def unknown_key(cls, key: str) -> BadCorrelationFilter:
        return cls(f"unknown correlation filter property {key!r}", hint=f"use {_CORRELATION_KNOWN}")
