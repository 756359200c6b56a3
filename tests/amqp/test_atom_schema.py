"""The admin API's XML read by a strict reader: Microsoft's schema, element by element, in order.

The expected lists below are written from Microsoft's schema for the Service Bus management
API (the `http://schemas.microsoft.com/netservices/2010/10/servicebus/connect` DataContracts:
QueueDescription, TopicDescription, SubscriptionDescription, RuleDescription and its filters and
actions), not read from sbdlq: a data-contract reader takes the elements only in that order,
and a strict client refuses a description that lacks one the service always writes.
"""

from __future__ import annotations

import re
import urllib.request
import xml.etree.ElementTree as ET
from typing import Any

import pytest

pytest.importorskip("proton")

_SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
_COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
_XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"

# (element, XSD type, required). Types: b boolean, i int, d duration, t dateTime, s string,
# x complex. Not required: what the service leaves out when it is not set.
_QUEUE = [
    ("LockDuration", "d", True),
    ("MaxSizeInMegabytes", "i", True),
    ("RequiresDuplicateDetection", "b", True),
    ("RequiresSession", "b", True),
    ("DefaultMessageTimeToLive", "d", True),
    ("DeadLetteringOnMessageExpiration", "b", True),
    ("DuplicateDetectionHistoryTimeWindow", "d", True),
    ("MaxDeliveryCount", "i", True),
    ("EnableBatchedOperations", "b", True),
    ("SizeInBytes", "i", True),
    ("MessageCount", "i", True),
    ("IsAnonymousAccessible", "b", True),
    ("AuthorizationRules", "x", True),
    ("Status", "s", True),
    ("CreatedAt", "t", True),
    ("UpdatedAt", "t", True),
    ("AccessedAt", "t", True),
    ("SupportOrdering", "b", True),
    ("CountDetails", "x", True),
    ("AutoDeleteOnIdle", "d", True),
    ("EnablePartitioning", "b", True),
    ("EntityAvailabilityStatus", "s", True),
    ("EnableExpress", "b", True),
    ("ForwardTo", "s", False),
    ("UserMetadata", "s", False),
    ("ForwardDeadLetteredMessagesTo", "s", False),
    ("MaxMessageSizeInKilobytes", "i", True),
]
_TOPIC = [
    ("DefaultMessageTimeToLive", "d", True),
    ("MaxSizeInMegabytes", "i", True),
    ("RequiresDuplicateDetection", "b", True),
    ("DuplicateDetectionHistoryTimeWindow", "d", True),
    ("EnableBatchedOperations", "b", True),
    ("SizeInBytes", "i", True),
    ("FilteringMessagesBeforePublishing", "b", True),
    ("IsAnonymousAccessible", "b", True),
    ("AuthorizationRules", "x", True),
    ("Status", "s", True),
    ("CreatedAt", "t", True),
    ("UpdatedAt", "t", True),
    ("AccessedAt", "t", True),
    ("SupportOrdering", "b", True),
    ("CountDetails", "x", True),
    ("SubscriptionCount", "i", True),
    ("SqlFilterCount", "i", True),
    ("CorrelationFilterCount", "i", True),
    ("AutoDeleteOnIdle", "d", True),
    ("EnablePartitioning", "b", True),
    ("EntityAvailabilityStatus", "s", True),
    ("EnableSubscriptionPartitioning", "b", True),
    ("EnableExpress", "b", True),
    ("UserMetadata", "s", False),
    ("MaxMessageSizeInKilobytes", "i", True),
]
_SUBSCRIPTION = [
    ("LockDuration", "d", True),
    ("RequiresSession", "b", True),
    ("DefaultMessageTimeToLive", "d", True),
    ("DeadLetteringOnMessageExpiration", "b", True),
    ("DeadLetteringOnFilterEvaluationExceptions", "b", True),
    ("MessageCount", "i", True),
    ("MaxDeliveryCount", "i", True),
    ("EnableBatchedOperations", "b", True),
    ("Status", "s", True),
    ("ForwardTo", "s", False),
    ("CreatedAt", "t", True),
    ("UpdatedAt", "t", True),
    ("AccessedAt", "t", True),
    ("CountDetails", "x", True),
    ("ForwardDeadLetteredMessagesTo", "s", False),
    ("AutoDeleteOnIdle", "d", True),
    ("EntityAvailabilityStatus", "s", True),
    ("UserMetadata", "s", False),
    ("DefaultRuleDescription", "x", False),
]
_RULE = [("Filter", "x", True), ("Action", "x", True), ("CreatedAt", "t", True), ("Name", "s", True)]
_COUNT_DETAILS = [
    ("ActiveMessageCount", "i", True),
    ("DeadLetterMessageCount", "i", True),
    ("ScheduledMessageCount", "i", True),
    ("TransferDeadLetterMessageCount", "i", True),
    ("TransferMessageCount", "i", True),
]
_SQL = [
    ("SqlExpression", "s", True),
    ("CompatibilityLevel", "i", True),
    ("Parameters", "x", False),
    ("RequiresPreprocessing", "b", False),
]
_CORRELATION = [
    ("CorrelationId", "s", False),
    ("MessageId", "s", False),
    ("To", "s", False),
    ("ReplyTo", "s", False),
    ("Label", "s", False),
    ("SessionId", "s", False),
    ("ReplyToSessionId", "s", False),
    ("ContentType", "s", False),
    ("Properties", "x", True),
]
#: a filter's or action's fields by its xsi:type
_TYPED = {
    "SqlFilter": _SQL,
    "TrueFilter": _SQL,
    "FalseFilter": _SQL,
    "CorrelationFilter": _CORRELATION,
    "SqlRuleAction": _SQL,
    "EmptyRuleAction": [],
}
_DESCRIPTIONS = {
    "QueueDescription": _QUEUE,
    "TopicDescription": _TOPIC,
    "SubscriptionDescription": _SUBSCRIPTION,
    "RuleDescription": _RULE,
}
_VALUE = {
    "b": re.compile(r"true|false"),
    "i": re.compile(r"-?\d+"),
    "d": re.compile(r"-?P(\d+D)?(T(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?"),
    "t": re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"),
}


class SchemaError(AssertionError):
    """The XML does not follow the schema."""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def strict_read(
    element: ET.Element, fields: list[tuple[str, str, bool]], where: str, ns: str = _SB
) -> dict[str, ET.Element]:
    """The element's children by name, when they follow `fields` in order; SchemaError otherwise."""
    found: dict[str, ET.Element] = {}
    position = 0
    for child in element:
        name = _local(child.tag)
        if child.tag != f"{{{ns}}}{name}":
            raise SchemaError(f"{where}: {child.tag} is not in the namespace {ns}")
        for index in range(position, len(fields)):
            expected, kind, required = fields[index]
            if expected == name:
                position = index + 1
                break
            if required:
                raise SchemaError(f"{where}: {expected} is missing (or {name} comes before it)")
        else:
            known = any(f[0] == name for f in fields)
            raise SchemaError(f"{where}: {name} " + ("is out of order" if known else "is not in the schema"))
        if kind in _VALUE and not _VALUE[kind].fullmatch(child.text or ""):
            raise SchemaError(f"{where}.{name}: {child.text!r} is not a valid {kind!r} value")
        found[name] = child
    missing = [f[0] for f in fields[position:] if f[2]]
    if missing:
        raise SchemaError(f"{where}: {', '.join(missing)} missing at the end")
    return found


def read_description(document: bytes) -> tuple[str, dict[str, ET.Element]]:
    """An Atom entry's description, read strictly: its kind and its elements."""
    entry = ET.fromstring(document)
    content = entry.find("{http://www.w3.org/2005/Atom}content")
    assert content is not None and len(content) == 1, "an entry has one content element with one description"
    description = content[0]
    kind = _local(description.tag)
    found = strict_read(description, _DESCRIPTIONS[kind], kind)
    if "CountDetails" in found:
        strict_read(found["CountDetails"], _COUNT_DETAILS, f"{kind}.CountDetails", _COUNTS)
    for part in ("Filter", "Action"):
        if part in found:
            xsi = (found[part].get(_XSI_TYPE) or "").rsplit(":", 1)[-1]
            if xsi not in _TYPED:
                raise SchemaError(f"{kind}.{part}: unknown i:type {xsi!r}")
            strict_read(found[part], _TYPED[xsi], f"{kind}.{part}[{xsi}]")
    return kind, found


def _get(emulator: Any, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{emulator.http_port}/{path}?api-version=2021-05", timeout=10) as r:
        body: bytes = r.read()
    return body


def test_the_strict_reader_refuses_what_the_old_descriptions_were() -> None:
    """The reader is strict: a description missing MaxSizeInMegabytes, or out of order, fails."""
    head = f'<entry xmlns="http://www.w3.org/2005/Atom"><content><QueueDescription xmlns="{_SB}">'
    short = head + "<LockDuration>PT1M</LockDuration><RequiresSession>false</RequiresSession>"
    with pytest.raises(SchemaError, match="MaxSizeInMegabytes is missing"):
        read_description((short + "</QueueDescription></content></entry>").encode())
    swapped = head + "<MaxSizeInMegabytes>1024</MaxSizeInMegabytes><LockDuration>PT1M</LockDuration>"
    with pytest.raises(SchemaError, match="LockDuration is missing"):
        read_description((swapped + "</QueueDescription></content></entry>").encode())


def test_entity_descriptions_follow_the_schema(emulator: Any) -> None:
    q = emulator.queue()
    topic = emulator.topic("s1")
    kind, queue = read_description(_get(emulator, q))
    assert kind == "QueueDescription"
    assert queue["MaxSizeInMegabytes"].text == "1024"
    assert (queue["EnablePartitioning"].text, queue["EnableBatchedOperations"].text) == ("false", "true")
    assert queue["DuplicateDetectionHistoryTimeWindow"].text == "PT10M"
    assert (queue["EnableExpress"].text, queue["MaxMessageSizeInKilobytes"].text) == ("false", "256")
    kind, top = read_description(_get(emulator, topic))
    assert kind == "TopicDescription" and top["SubscriptionCount"].text == "1"
    kind, sub = read_description(_get(emulator, f"{topic}/subscriptions/s1"))
    assert kind == "SubscriptionDescription" and sub["DeadLetteringOnFilterEvaluationExceptions"].text == "true"


def test_forwarding_entities_follow_the_schema(emulator: Any) -> None:
    dest = emulator.queue()
    q = emulator.queue(forward_to=dest, forward_dead_lettered_to=dest)
    _kind, queue = read_description(_get(emulator, q))
    assert (queue["ForwardTo"].text, queue["ForwardDeadLetteredMessagesTo"].text) == (dest, dest)


def test_the_admin_client_reads_the_service_defaults(emulator: Any) -> None:
    import datetime

    from azure.servicebus.management import ServiceBusAdministrationClient

    from sbdlq.backends.servicebus.clients import admin_transport

    q = emulator.queue()
    transport = admin_transport(10, emulator=True, port=emulator.http_port)
    with ServiceBusAdministrationClient.from_connection_string(emulator.conn_str(), transport=transport) as admin:
        props = admin.get_queue(q)
        assert (props.max_size_in_megabytes, props.enable_partitioning, props.enable_batched_operations) == (
            1024,
            False,
            True,
        )
        assert props.duplicate_detection_history_time_window == datetime.timedelta(minutes=10)
        assert (props.enable_express, props.max_message_size_in_kilobytes) == (False, 256)
        assert props.auto_delete_on_idle > datetime.timedelta(days=10_000_000)
        admin.update_queue(props)  # what it read goes back as it came
        assert admin.get_queue(q).max_size_in_megabytes == 1024


def test_rule_descriptions_follow_the_schema(emulator: Any) -> None:
    from datetime import timedelta

    from sbdlq.emulator.engine import Rule

    topic = emulator.topic("s")
    sub = f"{topic}/Subscriptions/s"
    engine = emulator.engine
    parameters = {"@n": 2, "@span": timedelta(minutes=1)}
    action = {"action": "SET a = @a", "action_parameters": {"@a": 1}}
    engine.add_rule(sub, Rule("p", sql="n > @n", parameters=parameters, **action))
    engine.add_rule(sub, Rule.false("none"))
    engine.add_rule(sub, Rule("c", correlation={"Properties": {"k": 1}, "Subject": "s", "CorrelationId": "c"}))
    types = {}
    for name in ("$Default", "p", "none", "c"):
        kind, rule = read_description(_get(emulator, f"{topic}/subscriptions/s/rules/{name}"))
        assert kind == "RuleDescription" and rule["Name"].text == name
        types[name] = (rule["Filter"].get(_XSI_TYPE), rule["Action"].get(_XSI_TYPE))
    assert types == {
        "$Default": ("TrueFilter", "EmptyRuleAction"),
        "p": ("SqlFilter", "SqlRuleAction"),
        "none": ("FalseFilter", "EmptyRuleAction"),
        "c": ("CorrelationFilter", "EmptyRuleAction"),
    }
    _kind, rule = read_description(_get(emulator, f"{topic}/subscriptions/s/rules/p"))
    values = [v.get(_XSI_TYPE) for v in rule["Filter"].iter(f"{{{_SB}}}Value")]
    assert values == ["d6p1:int", "d6p1:duration"]
