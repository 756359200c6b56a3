"""Entity descriptions: a queue's, topic's or subscription's properties, and a subscription's rules.

Apart from sbdlq.models (which re-exports them) so that `count`, which describes no entity,
starts without making them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sbdlq.models import MAX_TTL_S


@dataclass(slots=True)
class EntityInfo:
    """A queue, topic or subscription and the properties operations care about."""

    path: str  # `orders` or `topic/Subscriptions/sub`
    kind: str  # queue | topic | subscription
    requires_session: bool = False
    requires_duplicate_detection: bool = False
    lock_duration_s: float = 60.0
    max_delivery_count: int = 10
    default_ttl_s: float = MAX_TTL_S
    dead_lettering_on_expiration: bool = False
    dead_lettering_on_filter_exceptions: bool = True
    forward_to: str | None = None
    forward_dead_lettered_to: str | None = None
    status: str = "Active"
    subscription_count: int = 0
    duplicate_window_s: float = 600.0  # DuplicateDetectionHistoryTimeWindow (the service's PT10M)
    max_message_size_kb: int = 256  # MaxMessageSizeInKilobytes (Standard's 256 KB)
    created_at: datetime | None = None  # CreatedAt, UpdatedAt, AccessedAt (None: not known)
    updated_at: datetime | None = None
    accessed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionRule:
    """One rule of a subscription: a SQL or correlation filter and an optional SQL action."""

    name: str
    sql: str | None = None
    correlation: dict[str, Any] | None = None
    action: str | None = None
    parameters: dict[str, Any] | None = None  # the filter's `@name` values
    action_parameters: dict[str, Any] | None = None  # the action's `@name` values
    constant: bool | None = None  # the service's TrueFilter (True) or FalseFilter (False)


@dataclass(frozen=True, slots=True)
class SubscriptionRules:
    """A topic's subscription with its status and rules, as the routing check reads them."""

    subscription: str
    status: str
    rules: tuple[SubscriptionRule, ...]
    forward_to: str | None = None  # where the subscription auto-forwards what it takes
