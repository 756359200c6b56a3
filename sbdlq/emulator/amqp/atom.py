"""Atom XML documents as the Service Bus admin client reads them (entity entries and feeds)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from sbdlq.models import Counts, EntityInfo, SubscriptionRule

_ATOM = "http://www.w3.org/2005/Atom"
_SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
_COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"


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


def entry(info: EntityInfo, counts: Counts | None, url: str) -> str:
    """One Atom entry describing a queue, topic or subscription as the admin client expects."""
    kind = {"queue": "QueueDescription", "topic": "TopicDescription"}.get(info.kind, "SubscriptionDescription")
    now = _now()
    total = 0 if counts is None else counts.active + counts.dead_letter + counts.transfer_dead_letter + counts.scheduled
    fields: list[tuple[str, Any]] = [("DefaultMessageTimeToLive", _duration(info.default_ttl_s))]
    if info.kind != "topic":
        fields += [
            ("LockDuration", _duration(info.lock_duration_s)),
            ("RequiresSession", _bool(info.requires_session)),
            ("DeadLetteringOnMessageExpiration", _bool(info.dead_lettering_on_expiration)),
            ("MaxDeliveryCount", info.max_delivery_count),
            ("MessageCount", total),
        ]
    if info.kind != "subscription":
        fields.append(("RequiresDuplicateDetection", _bool(info.requires_duplicate_detection)))
    if info.kind == "topic":
        fields.append(("SubscriptionCount", info.subscription_count))
    fields += [("Status", info.status), ("CreatedAt", now), ("UpdatedAt", now), ("AccessedAt", now)]
    if info.forward_to:
        fields.append(("ForwardTo", info.forward_to))
    if info.forward_dead_lettered_to:
        fields.append(("ForwardDeadLetteredMessagesTo", info.forward_dead_lettered_to))
    body = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in fields) + _count_details(counts)
    title = escape(info.path.rsplit("/", 1)[-1] if info.kind == "subscription" else info.path)
    return (
        f'<entry xmlns="{_ATOM}">'
        f'<id>{escape(url)}</id><title type="text">{title}</title>'
        f"<published>{now}</published><updated>{now}</updated>"
        f'<content type="application/xml"><{kind} xmlns="{_SB}" '
        f'xmlns:i="http://www.w3.org/2001/XMLSchema-instance">{body}</{kind}></content></entry>'
    )


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


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


def _key_values(values: dict[str, Any]) -> str:
    """A correlation filter's properties as the admin client's key-value list."""
    xsd = "http://www.w3.org/2001/XMLSchema"
    out = []
    for key, value in values.items():
        kind = "boolean" if isinstance(value, bool) else "long" if isinstance(value, int) else (
            "double" if isinstance(value, float) else "string")  # fmt: skip
        text = _bool(value) if isinstance(value, bool) else str(value)
        out.append(
            f"<KeyValueOfstringanyType><Key>{escape(str(key))}</Key>"
            f'<Value i:type="d6p1:{kind}" xmlns:d6p1="{xsd}">{escape(text)}</Value></KeyValueOfstringanyType>'
        )
    return "".join(out)


def _rule_filter(rule: SubscriptionRule) -> str:
    """A rule's `<Filter>`: SQL (with the service's TrueFilter for `1=1`) or correlation."""
    if rule.correlation is None:
        sql = rule.sql or "1=1"
        kind = "TrueFilter" if "".join(sql.split()) == "1=1" else "SqlFilter"
        return (
            f'<Filter i:type="{kind}"><SqlExpression>{escape(sql)}</SqlExpression>'
            "<CompatibilityLevel>20</CompatibilityLevel></Filter>"
        )
    names = {"correlationid": "CorrelationId", "messageid": "MessageId", "to": "To", "replyto": "ReplyTo",
             "label": "Label", "subject": "Label", "sessionid": "SessionId", "replytosessionid": "ReplyToSessionId",
             "contenttype": "ContentType"}  # fmt: skip
    fields: list[str] = []
    props: dict[str, Any] = {}
    for key, value in rule.correlation.items():
        norm = str(key).replace("_", "").lower()
        if norm in ("properties", "applicationproperties", "userproperties"):
            props.update(value or {})
        elif norm in names and value is not None:
            fields.append(f"<{names[norm]}>{escape(str(value))}</{names[norm]}>")
    return f'<Filter i:type="CorrelationFilter">{"".join(fields)}<Properties>{_key_values(props)}</Properties></Filter>'


def rule_entry(rule: SubscriptionRule, url: str) -> str:
    """One Atom entry describing a subscription rule as the admin client's `list_rules` reads it."""
    now = _now()
    if rule.action:
        action = (
            f'<Action i:type="SqlRuleAction"><SqlExpression>{escape(rule.action)}</SqlExpression>'
            "<CompatibilityLevel>20</CompatibilityLevel></Action>"
        )
    else:
        action = '<Action i:type="EmptyRuleAction"/>'
    return (
        f'<entry xmlns="{_ATOM}">'
        f'<id>{escape(url)}</id><title type="text">{escape(rule.name)}</title>'
        f"<published>{now}</published><updated>{now}</updated>"
        f'<content type="application/xml"><RuleDescription xmlns="{_SB}" '
        f'xmlns:i="http://www.w3.org/2001/XMLSchema-instance">{_rule_filter(rule)}{action}'
        f"<CreatedAt>{now}</CreatedAt><Name>{escape(rule.name)}</Name></RuleDescription></content></entry>"
    )
