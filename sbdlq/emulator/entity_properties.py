"""Entity property names as Microsoft's Config.json and the ATOM management API spell them.

One table for both: the Config.json loader (config_json.py) and the HTTP port's entity writes
(amqp/atom_write.py) read the same names, for the same entity kinds, into the same engine
keywords; an omitted property takes the engine's default (MaxDeliveryCount 10, LockDuration
PT1M, messages never expire), as the service does.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from sbdlq.emulator.engine.vocabulary import MAX_MESSAGE_KB
from sbdlq.errors import BadInput
from sbdlq.timeparse import parse_duration

# Property name → (engine keyword, value kind, the entity kinds that take it).
_TABLE: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "DeadLetteringOnMessageExpiration": ("dead_lettering_on_expiration", "bool", ("queue", "subscription")),
    "DefaultMessageTimeToLive": ("default_ttl_s", "duration", ("queue", "topic", "subscription")),
    "DuplicateDetectionHistoryTimeWindow": ("duplicate_window_s", "duration", ("queue", "topic")),
    "ForwardDeadLetteredMessagesTo": ("forward_dead_lettered_to", "destination", ("queue", "subscription")),
    "ForwardTo": ("forward_to", "destination", ("queue", "subscription")),
    "LockDuration": ("lock_duration_s", "duration", ("queue", "subscription")),
    "MaxDeliveryCount": ("max_delivery_count", "count", ("queue", "subscription")),
    "RequiresDuplicateDetection": ("requires_duplicate_detection", "bool", ("queue", "topic")),
    "RequiresSession": ("requires_session", "bool", ("queue", "subscription")),
    "DeadLetteringOnFilterEvaluationExceptions": ("dead_lettering_on_filter_exceptions", "bool", ("subscription",)),
    "Status": ("status", "status", ("queue", "topic", "subscription")),
    "MaxSizeInMessages": ("max_size", "count", ("queue",)),
    "MaxMessageSizeInKilobytes": ("max_message_size_kb", "message_kb", ("queue", "topic")),
}
# Property name → (engine keyword, value kind).
PROPERTIES: dict[str, tuple[str, str]] = {name: (keyword, kind) for name, (keyword, kind, _) in _TABLE.items()}
# Entity kind → the properties it takes, in the table's order.
ALLOWED: dict[str, tuple[str, ...]] = {
    entity: tuple(name for name, (_, _, takers) in _TABLE.items() if entity in takers)
    for entity in ("queue", "topic", "subscription")
}
STATUSES = {"active": "Active", "disabled": "Disabled"}


def destination_path(text: str) -> str:
    """A forwarding destination as an entity path: the admin SDK sends `sb://host/name`."""
    raw = text.strip()
    if "://" in raw:
        raw = urlsplit(raw).path
    return raw.strip("/")


def from_text(name: str, text: str) -> Any:
    """An ATOM property's text as the engine keyword's value; BadInput names the property."""
    kind = PROPERTIES[name][1]
    value = text.strip()
    if kind == "bool" and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if kind == "count" and value.isdigit() and int(value) >= 1:
        return int(value)
    if kind == "message_kb" and value.isdigit() and 1 <= int(value) <= MAX_MESSAGE_KB:
        return int(value)
    if kind == "status" and value.casefold() in STATUSES:
        return STATUSES[value.casefold()]
    if kind == "destination":
        return destination_path(value)
    if kind == "duration" and value.upper().startswith("P"):
        try:
            seconds = parse_duration(value)
        except BadInput:
            seconds = 0.0
        if seconds > 0:
            return seconds
    raise BadInput(f"{name}: invalid value {value[:60]!r}")
