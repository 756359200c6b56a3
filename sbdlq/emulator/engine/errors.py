"""The broker's refusals, named, with the service's wording in one place.

Each is a subclass of the sbdlq error its callers already catch (EntityNotFound,
InvalidOperation, ...), so the exit statuses and AMQP conditions stay what they were.
"""

from __future__ import annotations

from typing import ClassVar

from sbdlq.errors import (
    BadInput,
    EntityDisabled,
    EntityNotFound,
    InvalidOperation,
    LockLost,
    MessageNotFound,
    QuotaExceeded,
    RuleChanged,
    SbdlqError,
    TransientError,
)
from sbdlq.sqlfilter.correlation import BadCorrelationFilter as BadCorrelationFilter  # re-exported: it moved


class Refusal(SbdlqError):
    """A refusal whose whole message is its class's `wording`, filled in from the arguments, in order."""

    wording: ClassVar[str]

    def __init__(self, *subjects: object) -> None:
        super().__init__(self.text(*subjects))

    @classmethod
    def text(cls, *subjects: object) -> str:
        """The wording alone: also the description of a forward the same rule refused."""
        return cls.wording.format(*subjects)


class EntityMissing(Refusal, EntityNotFound):
    """No entity at that path (the wording is also a forward's that found no destination)."""

    wording = "The messaging entity '{}' could not be found."


class EntityIsDisabled(Refusal, EntityDisabled):
    """The entity refuses sends while disabled (the wording is also a forward's to it)."""

    wording = "Messaging entity '{}' is currently disabled."


class EntityFull(Refusal, QuotaExceeded):
    """A queue at its MaxSize (the wording is also a forward's to it)."""

    wording = "The messaging entity '{}' is full ({} messages)."  # (path, max_size)


class EntityCountQuota(Refusal, QuotaExceeded):
    """A queue or topic past the namespace's quota of them (--quotas). The wording is ours,
    in the service's words for its other quotas: Service Bus's text for this one is not published."""

    wording = (
        "The maximum number of queues and topics in the namespace ({}) has been reached or exceeded: "
        "'{}' was not created. QuotaType: EntityCount"
    )  # (quota, path)


class SubscriptionCountQuota(Refusal, QuotaExceeded):
    """A subscription past its topic's quota of them (--quotas). The wording is ours (see
    EntityCountQuota)."""

    wording = (
        "The maximum number of subscriptions on topic '{}' ({}) has been reached or exceeded: "
        "'{}' was not created. QuotaType: SubscriptionCount"
    )  # (topic, quota, path)


class EntitySizeQuota(Refusal, QuotaExceeded):
    """A send that would take an entity past its size quota (--quotas): Service Bus's wording."""

    wording = (
        "The maximum entity size has been reached or exceeded for {}: '{}'. "
        "Size of entity in bytes:{}, Max entity size in bytes: {}. QuotaType: EntitySize"
    )  # (Queue | Topic, path, size, quota)


class TimeToLiveOverQuota(Refusal, BadInput):
    """A DefaultMessageTimeToLive past the quota's (--quotas). The wording is ours."""

    wording = "The value supplied for DefaultMessageTimeToLive ({}) exceeds the maximum of {} allowed here."


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


class EntityExists(Refusal, InvalidOperation):
    """Creating an entity that exists, without exist_ok."""

    wording = "The messaging entity '{}' already exists."


class RuleExists(EntityExists):
    """Adding a rule whose name the subscription already has."""

    def __init__(self, subscription: str, name: str) -> None:
        super().__init__(f"{subscription}/Rules/{name}")


class RuleNotAsRead(Refusal, RuleChanged):
    """A rule change given the rule the caller read, when the held one is another (or none)."""

    wording = "The rule '{}' of '{}' is not the one expected: it was changed or removed."


class RuleMissing(EntityMissing):
    """No rule of that name on the subscription."""

    def __init__(self, subscription: str, name: str) -> None:
        super().__init__(f"{subscription}/Rules/{name}")


class SendToSubscription(Refusal, InvalidOperation):
    """Subscriptions are fed by their topic only."""

    wording = "Cannot send to subscription '{}': send to its topic."


class SessionIdMissing(Refusal, InvalidOperation):
    """A message without a session id sent to a session-enabled queue."""

    wording = (
        "The SessionId was not set on a message, and it cannot be sent to the entity. "
        "Entities that have session support enabled can only receive messages that have "
        "the SessionId set to a valid value."
    )


class IdTooLong(Refusal, InvalidOperation):
    """A message id, session id or partition key past the 128 characters Service Bus takes."""

    wording = "The {} '{}...' is {} characters long: the maximum is 128."


class AlreadyDeadLettered(Refusal, InvalidOperation):
    """Dead-lettering from a dead-letter queue."""

    wording = "Cannot dead-letter a message that is already in a dead-letter queue."


class NotDeferred(Refusal, MessageNotFound):
    """receive_deferred named a message that isn't deferred here."""

    wording = "Failed to lock one or more specified messages: {} is not deferred."


class ScheduledMissing(Refusal, MessageNotFound):
    """cancel_scheduled named numbers that are not scheduled messages of the entity (Service Bus's wording)."""

    wording = "Messages not found. Missing sequence numbers: {}"


class DeferredLocked(Refusal, MessageNotFound):
    """receive_deferred named a deferred message another receiver holds."""

    wording = "The deferred message {} is locked by another receiver."


class NoSessionAvailable(Refusal, TransientError):
    """A session receiver asked for the next session and none has messages."""

    wording = "No sessions are available."


class SessionCannotBeLocked(Refusal, InvalidOperation):
    """A receiver asked for a session another receiver holds."""

    wording = "The requested session '{}' cannot be accepted. It may be locked by another receiver."


class SessionLockLost(Refusal, LockLost):
    """The session's lock lapsed or another receiver took the session."""

    wording = "The session lock has expired on the session '{}'. Accept a new session."


class NotATopic(Refusal, BadInput):
    """A subscription created under something that isn't a topic."""

    wording = "{!r} is a {}, not a topic"  # (path, kind)


class NotASubscription(Refusal, BadInput):
    """Rules belong to subscriptions."""

    wording = "{!r} is a {}, not a subscription: only subscriptions have rules"  # (path, kind)


class KindMismatch(Refusal, BadInput):
    """exist_ok creation of an entity that exists as another kind."""

    wording = "{!r} already exists as a {}, not a {}"  # (path, existing kind, wanted kind)


class TopicHasNoCounts(Refusal, BadInput):
    """Counts asked of a topic."""

    wording = "{!r} is a topic: counts are per subscription"


class TopicNotReadable(Refusal, BadInput):
    """Receiving or settling on a topic."""

    wording = "{!r} is a topic: read from one of its subscriptions (TOPIC/Subscriptions/SUB)"


class InvalidStatus(Refusal, BadInput):
    """An entity status other than Active or Disabled."""

    wording = "invalid status {!r}: Active or Disabled"


class UnknownEntityProperties(BadInput):
    """Entity properties the engine doesn't know."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(f"unknown entity properties: {', '.join(sorted(names))}")


class MaxDeliveryCountTooLow(Refusal, BadInput):
    """MaxDeliveryCount below 1."""

    wording = "MaxDeliveryCount must be at least 1"


class MaxDeliveryCountTooHigh(Refusal, BadInput):
    """MaxDeliveryCount past a 32-bit int (what the service stores)."""

    wording = "MaxDeliveryCount must be at most 2147483647"


class LockDurationTooLong(Refusal, BadInput):
    """A lock duration past the 5 minutes Service Bus allows."""

    wording = "LockDuration must be at most 5 minutes (PT5M)"


class MaxMessageSizeOutOfRange(Refusal, BadInput):
    """MaxMessageSizeInKilobytes outside 1 .. 102400 (Premium's 100 MB)."""

    wording = "MaxMessageSizeInKilobytes must be between 1 and {1}, got {0!r}"  # (value, ceiling)


class NotPositive(BadInput):
    """A duration or time to live that is zero or negative (the message names which)."""
