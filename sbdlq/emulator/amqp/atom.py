"""Atom XML documents as the Service Bus admin client reads them (entity entries and feeds)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit
from xml.sax.saxutils import escape, quoteattr

from sbdlq.models import COUNT_NAMES, Counts, EntityInfo

_ATOM = "http://www.w3.org/2005/Atom"
_SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
_COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"


@dataclass(frozen=True, slots=True)
class Site:
    """Where a request reached the admin API (`scheme://host[:port]`) and the api-version it asked
    for: every entry's id and self link is its entity's URL there, as Service Bus writes them (the
    JavaScript SDK takes entity, subscription and rule names from the id's path)."""

    base: str
    api_version: str = ""

    def url(self, path: str) -> str:
        """The URL of an entity or rule path (`t/Subscriptions/s/Rules/r`) at this site."""
        query = f"?api-version={quote(self.api_version)}" if self.api_version else ""
        return f"{self.base}/{quote(path, safe='/$')}{query}"

    @property
    def author(self) -> str:
        """The namespace's name, as the service writes an entry's author: the host's first label
        (an IP address whole)."""
        host = urlsplit(self.base).hostname or "localhost"
        return host if host.replace(".", "").isdigit() or ":" in host else host.split(".", 1)[0]


def _entry(
    site: Site, path: str, title: str, content: str, *, feed_url: str | None, published: str, updated: str
) -> str:
    """One Atom entry as Service Bus writes it: id and self link the item's URL, its name as title."""
    url = site.url(path)
    base = f" xml:base={quoteattr(feed_url)}" if feed_url else ""
    return (
        f'<entry xmlns="{_ATOM}"{base}>'
        f'<id>{escape(url)}</id><title type="text">{escape(title)}</title>'
        f"<published>{published}</published><updated>{updated}</updated>"
        f"<author><name>{escape(site.author)}</name></author>"
        f'<link rel="self" href={quoteattr(url)}/>'
        f'<content type="application/xml">{content}</content></entry>'
    )


def _duration(seconds: float) -> str:
    """ISO 8601 duration as .NET writes TimeSpan (`P10675199DT2H48M5S`, `PT1M`)."""
    days, rest = divmod(max(seconds, 0.0), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = "".join(f"{v:g}{u}" for v, u in ((int(hours), "H"), (int(minutes), "M"), (round(secs, 3), "S")) if v)
    text = "P" + (f"{int(days)}D" if days else "") + (f"T{clock}" if clock else "")
    return text if text != "P" else "PT0S"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _count_details(counts: Counts | None) -> str:
    c = counts or Counts(entity="")
    fields = {
        "ActiveMessageCount": c.active,
        "DeadLetterMessageCount": c.dead_letter,
        "ScheduledMessageCount": c.scheduled,
        "TransferDeadLetterMessageCount": c.transfer_dead_letter,
        "TransferMessageCount": 0,
    }
    inner = "".join(f"<d2p1:{k}>{v}</d2p1:{k}>" for k, v in fields.items())
    return f'<CountDetails xmlns:d2p1="{_COUNTS}">{inner}</CountDetails>'


#: The elements of each description, in the order of Microsoft's schema (the DataContract order
#: the service writes and reads; azure-servicebus lists it in management/_model_workaround.py).
ORDER: dict[str, tuple[str, ...]] = {
    "QueueDescription": (
        "LockDuration", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "RequiresSession",
        "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration", "DuplicateDetectionHistoryTimeWindow",
        "MaxDeliveryCount", "EnableBatchedOperations", "SizeInBytes", "MessageCount", "IsAnonymousAccessible",
        "AuthorizationRules", "Status", "CreatedAt", "UpdatedAt", "AccessedAt", "SupportOrdering", "CountDetails",
        "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus", "EnableExpress", "ForwardTo",
        "UserMetadata", "ForwardDeadLetteredMessagesTo", "MaxMessageSizeInKilobytes",
    ),
    "TopicDescription": (
        "DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection",
        "DuplicateDetectionHistoryTimeWindow", "EnableBatchedOperations", "SizeInBytes",
        "FilteringMessagesBeforePublishing", "IsAnonymousAccessible", "AuthorizationRules", "Status", "CreatedAt",
        "UpdatedAt", "AccessedAt", "SupportOrdering", "CountDetails", "SubscriptionCount", "SqlFilterCount",
        "CorrelationFilterCount", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
        "EnableSubscriptionPartitioning", "EnableExpress", "UserMetadata", "MaxMessageSizeInKilobytes",
    ),
    "SubscriptionDescription": (
        "LockDuration", "RequiresSession", "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration",
        "DeadLetteringOnFilterEvaluationExceptions", "MessageCount", "MaxDeliveryCount", "EnableBatchedOperations",
        "Status", "ForwardTo", "CreatedAt", "UpdatedAt", "AccessedAt", "CountDetails",
        "ForwardDeadLetteredMessagesTo", "AutoDeleteOnIdle", "EntityAvailabilityStatus", "UserMetadata",
        "DefaultRuleDescription",
    ),
}  # fmt: skip
#: .NET's TimeSpan.MaxValue as the service writes it: AutoDeleteOnIdle's default (never)
NEVER = "P10675199DT2H48M5.4775807S"
#: MaxSizeInMegabytes of a Standard namespace's entities (the emulator enforces no size)
MAX_SIZE_MB = 1024


def _elements(info: EntityInfo, counts: Counts | None, now: str) -> dict[str, str | None]:
    """Every element an entity's description may have, as XML (None: left out, as the service
    leaves out what is not set); the kind's ORDER picks and orders them."""
    total = 0 if counts is None else sum(getattr(counts, name) for name in COUNT_NAMES)
    text: dict[str, Any] = {
        "LockDuration": _duration(info.lock_duration_s),
        "MaxSizeInMegabytes": MAX_SIZE_MB,
        "RequiresDuplicateDetection": _bool(info.requires_duplicate_detection),
        "RequiresSession": _bool(info.requires_session),
        "DefaultMessageTimeToLive": _duration(info.default_ttl_s),
        "DeadLetteringOnMessageExpiration": _bool(info.dead_lettering_on_expiration),
        "DeadLetteringOnFilterEvaluationExceptions": _bool(info.dead_lettering_on_filter_exceptions),
        "DuplicateDetectionHistoryTimeWindow": _duration(info.duplicate_window_s),
        "MaxDeliveryCount": info.max_delivery_count,
        "EnableBatchedOperations": "true",
        "SizeInBytes": 0,
        "MessageCount": total,
        "FilteringMessagesBeforePublishing": "false",
        "IsAnonymousAccessible": "false",
        "Status": info.status,
        "ForwardTo": info.forward_to,
        "CreatedAt": _when(info.created_at, now),
        "UpdatedAt": _when(info.updated_at, now),
        "AccessedAt": _when(info.accessed_at, now),
        "SupportOrdering": "true",
        "SubscriptionCount": info.subscription_count,
        "SqlFilterCount": 0,
        "CorrelationFilterCount": 0,
        "AutoDeleteOnIdle": NEVER,
        "EnablePartitioning": "false",
        "EntityAvailabilityStatus": "Available",
        "EnableSubscriptionPartitioning": "false",
        "EnableExpress": "false",
        "UserMetadata": None,
        "ForwardDeadLetteredMessagesTo": info.forward_dead_lettered_to,
        "MaxMessageSizeInKilobytes": info.max_message_size_kb,
        "DefaultRuleDescription": None,  # only in a create request: the service never sends it back
    }
    out: dict[str, str | None] = {k: None if v is None else f"<{k}>{escape(str(v))}</{k}>" for k, v in text.items()}
    out["AuthorizationRules"] = "<AuthorizationRules/>"
    out["CountDetails"] = _count_details(counts)
    return out


def entry(info: EntityInfo, counts: Counts | None, site: Site, *, feed_url: str | None = None) -> str:
    """One Atom entry describing a queue, topic or subscription as the admin client expects:
    every element of Microsoft's schema for it, in the schema's order, with the service's defaults.
    feed_url: the feed it is listed in (the entry's xml:base)."""
    kind = {"queue": "QueueDescription", "topic": "TopicDescription"}.get(info.kind, "SubscriptionDescription")
    now = _now()
    elements = _elements(info, counts, now)
    body = "".join(x for name in ORDER[kind] if (x := elements[name]) is not None)
    title = info.path.rsplit("/", 1)[-1] if info.kind == "subscription" else info.path
    content = f'<{kind} xmlns="{_SB}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">{body}</{kind}>'
    created, updated = _when(info.created_at, now), _when(info.updated_at, now)
    return _entry(site, info.path, title, content, feed_url=feed_url, published=created, updated=updated)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _when(moment: datetime | None, default: str) -> str:
    """A stored time as the service writes it (UTC, `Z`), or default when the store has none."""
    if moment is None:
        return default
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def document(xml: str) -> str:
    """A complete XML document around an entry or a feed."""
    return '<?xml version="1.0" encoding="utf-8"?>' + xml


def feed(title: str, url: str, entries: list[str], next_url: str | None) -> str:
    """A page of entries; a `next` link tells the admin client another page follows."""
    links = f'<link rel="self" href={quoteattr(url)}/>'
    if next_url:
        links += f'<link rel="next" href={quoteattr(next_url)}/>'
    return (
        f'<feed xmlns="{_ATOM}"><title type="text">{escape(title)}</title><id>{escape(url)}</id>'
        f"<updated>{_now()}</updated>{links}{''.join(entries)}</feed>"
    )


_INT32_MAX = 2**31 - 1


def _xsd_value(value: Any) -> tuple[str, str]:
    """A property's or parameter's XSD type and text, as azure-servicebus writes and reads them."""
    if isinstance(value, bool):
        return "boolean", _bool(value)
    if isinstance(value, int):
        return ("int" if -_INT32_MAX - 1 <= value <= _INT32_MAX else "long"), str(value)
    if isinstance(value, float):
        return "double", repr(value)
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return "dateTime", aware.isoformat()
    if isinstance(value, timedelta):
        return "duration", _duration(value.total_seconds())
    return "string", "" if value is None else str(value)


def _key_values(values: dict[str, Any]) -> str:
    """A correlation filter's properties, or a SQL filter's or action's parameters, as the admin
    client's key-value list."""
    xsd = "http://www.w3.org/2001/XMLSchema"
    out = []
    for key, value in values.items():
        kind, text = _xsd_value(value)
        out.append(
            f"<KeyValueOfstringanyType><Key>{escape(str(key))}</Key>"
            f'<Value i:type="d6p1:{kind}" xmlns:d6p1="{xsd}">{escape(text)}</Value></KeyValueOfstringanyType>'
        )
    return "".join(out)


def _sql(expression: str, parameters: dict[str, Any] | None) -> str:
    """A `<Filter>` or `<Action>` of SQL: its elements in the schema's order."""
    params = f"<Parameters>{_key_values(parameters)}</Parameters>" if parameters else ""
    return (
        f"<SqlExpression>{escape(expression)}</SqlExpression><CompatibilityLevel>20</CompatibilityLevel>"
        f"{params}<RequiresPreprocessing>false</RequiresPreprocessing>"
    )


def _rule_filter(rule: Any) -> str:
    """A rule's `<Filter>`: SQL, the service's TrueFilter or FalseFilter, or correlation."""
    if rule.correlation is None:
        constant = getattr(rule, "constant", None)
        kind = "SqlFilter" if constant is None else "TrueFilter" if constant else "FalseFilter"
        body = _sql(rule.sql or "1=1", getattr(rule, "parameters", None))
        return f'<Filter i:type="{kind}">{body}</Filter>'
    names = {"correlationid": "CorrelationId", "messageid": "MessageId", "to": "To", "replyto": "ReplyTo",
             "label": "Label", "subject": "Label", "sessionid": "SessionId", "replytosessionid": "ReplyToSessionId",
             "contenttype": "ContentType"}  # fmt: skip
    found: dict[str, str] = {}
    props: dict[str, Any] = {}
    for key, value in rule.correlation.items():
        norm = str(key).replace("_", "").lower()
        if norm in ("properties", "applicationproperties", "userproperties"):
            props.update(value or {})
        elif norm in names and value is not None:
            found[names[norm]] = f"<{names[norm]}>{escape(str(value))}</{names[norm]}>"
    # In the schema's order, whatever order the rule names them in.
    fields = "".join(found[name] for name in dict.fromkeys(names.values()) if name in found)
    return f'<Filter i:type="CorrelationFilter">{fields}<Properties>{_key_values(props)}</Properties></Filter>'


def rule_entry(rule: Any, subscription: str, site: Site, *, feed_url: str | None = None) -> str:
    """One Atom entry describing a rule of `subscription` (the engine's Rule, or a SubscriptionRule)
    as the admin client's `get_rule` and `list_rules` read it."""
    now = _now()
    if rule.action:
        body = _sql(rule.action, getattr(rule, "action_parameters", None))
        action = f'<Action i:type="SqlRuleAction">{body}</Action>'
    else:
        action = '<Action i:type="EmptyRuleAction"/>'
    content = (
        f'<RuleDescription xmlns="{_SB}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">'
        f"{_rule_filter(rule)}{action}<CreatedAt>{now}</CreatedAt><Name>{escape(rule.name)}</Name></RuleDescription>"
    )
    path = f"{subscription}/Rules/{rule.name}"
    return _entry(site, path, rule.name, content, feed_url=feed_url, published=now, updated=now)
