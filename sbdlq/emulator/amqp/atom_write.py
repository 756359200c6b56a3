"""The ATOM management API's writes: create, update and delete entities and rules, and get one rule.

Requests are what azure-servicebus's ServiceBusAdministrationClient sends (seen on the wire):
`PUT /{queue|topic}`, `PUT /{topic}/subscriptions/{sub}`, `PUT /{topic}/subscriptions/{sub}/rules/{rule}`
with an Atom entry whose content is a `QueueDescription`, `TopicDescription`,
`SubscriptionDescription` or `RuleDescription`; an update is the same PUT with `If-Match: *`;
`DELETE` the same paths. Property names and defaults are the Config.json loader's
(sbdlq/emulator/entity_properties.py). Properties the emulator does not implement (partitioning,
auto-delete on idle, size in megabytes, authorization rules, ...) are accepted and ignored.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sbdlq.addresses import EntityPath
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.emulator.engine.errors import EntityMissing
from sbdlq.emulator.entity_properties import ALLOWED, PROPERTIES, from_text
from sbdlq.errors import BadInput
from sbdlq.timeparse import parse_duration

from . import atom

_SB = "{http://schemas.microsoft.com/netservices/2010/10/servicebus/connect}"
_XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"
_DESCRIPTIONS = {
    "QueueDescription": "queue",
    "TopicDescription": "topic",
    "SubscriptionDescription": "subscription",
    "RuleDescription": "rule",
}
_CORRELATION_FIELDS = ("CorrelationId", "MessageId", "To", "ReplyTo", "Label", "SessionId", "ReplyToSessionId",
                       "ContentType")  # fmt: skip
_INTEGER_TYPES = {"int", "long", "short", "byte", "unsignedInt", "unsignedLong", "unsignedShort", "unsignedByte"}
_NUMBER_TYPES = {"double", "float", "decimal"}
#: the largest request body read (an entity description is well under 10 KB)
MAX_BODY = 1 << 20


@dataclass(frozen=True, slots=True)
class Target:
    """What a management path names: an entity (`rule` None) or a subscription's rule."""

    path: str  # `queue`, `topic` or `topic/Subscriptions/sub`
    subscription: bool
    rule: str | None = None


def target(path: str) -> Target:
    """Classify `name`, `topic/subscriptions/sub` and `topic/subscriptions/sub/rules/rule` (any case)."""
    parts = path.strip("/").split("/")
    lowered = [p.lower() for p in parts]
    if len(parts) >= 5 and lowered[-4] == "subscriptions" and lowered[-2] == "rules":
        sub = EntityPath("/".join(parts[:-4]), parts[-3])
        return Target(str(sub), True, parts[-1])
    if len(parts) >= 3 and lowered[-2] == "subscriptions":
        return Target(str(EntityPath("/".join(parts[:-2]), parts[-1])), True)
    if not path.strip("/"):
        raise BadInput("no entity named")
    return Target(path.strip("/"), False)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def description(body: bytes) -> tuple[str, ET.Element]:
    """The kind and element of the description inside an Atom entry (or a bare description)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise BadInput(f"the request body is not XML: {exc}") from None
    for element in root.iter():
        kind = _DESCRIPTIONS.get(_local(element.tag))
        if kind is not None:
            return kind, element
    raise BadInput("the request body has no Queue, Topic, Subscription or Rule description")


def entity_props(kind: str, element: ET.Element) -> dict[str, Any]:
    """The engine keywords of a description's properties that Config.json also knows."""
    props: dict[str, Any] = {}
    for child in element:
        name = _local(child.tag)
        if name in ALLOWED[kind]:
            props[PROPERTIES[name][0]] = from_text(name, child.text or "")
    return props


def _child(element: ET.Element, name: str) -> ET.Element | None:
    for child in element:
        if _local(child.tag) == name:
            return child
    return None


def _text(element: ET.Element | None, name: str) -> str | None:
    found = None if element is None else _child(element, name)
    return None if found is None or found.text is None else found.text


def _typed(value: ET.Element) -> Any:
    """A correlation property's or parameter's `<Value i:type="d6p1:int">` as a Python value."""
    xsd_type = (value.get(_XSI_TYPE) or "string").rsplit(":", 1)[-1]
    text = value.text or ""
    try:
        if xsd_type in _INTEGER_TYPES:
            return int(text)
        if xsd_type in _NUMBER_TYPES:
            return float(text)
        if xsd_type == "dateTime":
            when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
            return when if when.tzinfo else when.replace(tzinfo=UTC)
        if xsd_type == "duration":
            return timedelta(seconds=parse_duration(text, what="a duration value"))
    except ValueError:
        raise BadInput(f"{text[:60]!r} is not a valid {xsd_type}") from None
    if xsd_type == "boolean":
        return text.strip().lower() == "true"
    return text


def _key_values(element: ET.Element | None) -> dict[str, Any]:
    """A `<Properties>` or `<Parameters>` list of KeyValueOfstringanyType as a dict."""
    values: dict[str, Any] = {}
    for pair in [] if element is None else list(element):
        key, value = _text(pair, "Key"), _child(pair, "Value")
        if key is not None and value is not None:
            values[key] = _typed(value)
    return values


def rule_from(name: str, element: ET.Element) -> Rule:
    """The engine's rule for a `RuleDescription` (or a subscription's `DefaultRuleDescription`)."""
    flt = _child(element, "Filter")
    act = _child(element, "Action")
    is_sql_action = act is not None and "SqlRuleAction" in (act.get(_XSI_TYPE) or "")
    action = _text(act, "SqlExpression") if is_sql_action else None
    action_parameters = _key_values(_child(act, "Parameters")) if is_sql_action and act is not None else {}
    ftype = "TrueFilter" if flt is None else (flt.get(_XSI_TYPE) or "SqlFilter").rsplit(":", 1)[-1]
    rule = _filter_rule(name, ftype, flt)
    rule.action, rule.action_parameters = action, action_parameters or None
    return rule


def _filter_rule(name: str, ftype: str, flt: ET.Element | None) -> Rule:
    """A rule with the filter of a `<Filter i:type=...>` (TrueFilter and FalseFilter keep their type)."""
    if ftype == "CorrelationFilter":
        assert flt is not None
        correlation: dict[str, Any] = {k: v for k in _CORRELATION_FIELDS if (v := _text(flt, k)) is not None}
        values = _key_values(_child(flt, "Properties"))
        if values:
            correlation["Properties"] = values
        if not correlation:
            raise BadInput("a CorrelationFilter needs at least one property to match")
        return Rule(name=name, correlation=correlation)
    if ftype == "FalseFilter":
        return Rule.false(name)
    if ftype == "TrueFilter":
        return Rule.true(name)
    parameters = _key_values(_child(flt, "Parameters")) if flt is not None else {}
    return Rule(name=name, sql=_text(flt, "SqlExpression") or "1=1", parameters=parameters or None)


def _check_forwards(engine: Engine, path: str, props: dict[str, Any]) -> None:
    """Forwarding names an existing queue or topic other than the entity itself, as the service requires."""
    for key in ("forward_to", "forward_dead_lettered_to"):
        dest = props.get(key)
        if not dest:
            props.pop(key, None)
            continue
        if dest.casefold() == path.casefold():
            raise BadInput(f"{path!r} cannot forward to itself")
        if engine.get_entity(dest).kind == "subscription":
            raise BadInput(f"cannot forward to subscription {dest!r}; name its topic")


def put(engine: Engine, path: str, body: bytes, *, update: bool, site: atom.Site) -> str:
    """Create (or with update, change) what path names; the Atom entry of the result."""
    where = target(path)
    kind, element = description(body)
    if where.rule is not None:
        if kind != "rule":
            raise BadInput(f"a rule path needs a RuleDescription, not a {kind} description")
        rule = engine.add_rule(where.path, rule_from(where.rule, element), replace=update)
        return atom.rule_entry(rule, where.path, site)
    if kind not in (("subscription",) if where.subscription else ("queue", "topic")):
        raise BadInput(f"{where.path!r} cannot be described by a {kind} description")
    if update:
        engine.get_entity(where.path)  # EntityNotFound: an update needs the entity
    props = entity_props(kind, element)
    _check_forwards(engine, where.path, props)
    if kind == "queue":
        info = engine.create_queue(where.path, exist_ok=update, **props)
    elif kind == "topic":
        info = engine.create_topic(where.path, exist_ok=update, **props)
    else:
        topic, _, sub = where.path.rpartition("/Subscriptions/")
        default = _child(element, "DefaultRuleDescription")
        rules = None if default is None else [rule_from(_text(default, "Name") or "$Default", default)]
        info = engine.create_subscription(topic, sub, rules=rules, exist_ok=update, **props)
    return atom.entry(info, None if kind == "topic" else engine.counts(where.path), site)


def delete(engine: Engine, path: str) -> None:
    """Delete what path names: an entity (a topic with its subscriptions) or a rule."""
    where = target(path)
    if where.rule is not None:
        engine.remove_rule(where.path, where.rule)
    else:
        engine.delete_entity(where.path)


def get_rule(engine: Engine, path: str, site: atom.Site) -> str:
    """The Atom entry of the rule path names; EntityNotFound when missing."""
    where = target(path)
    assert where.rule is not None
    for rule in engine.rules(where.path):
        if rule.name.casefold() == where.rule.casefold():
            return atom.rule_entry(rule, where.path, site)
    raise EntityMissing(f"{where.path}/Rules/{where.rule}")
