"""`$management` rule operations (add-rule, remove-rule, enumerate-rules) of a subscription.

The Python SDK has no rule manager, but it defines the operations and sends any of them
through its own management link (`_mgmt_request_response_with_retry`): the requests
here go through that unmodified path. A bare proton client checks the described types.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.servicebus import ServiceBusMessage
from azure.servicebus._common import constants, mgmt_handlers
from azure.servicebus.exceptions import MessagingEntityAlreadyExistsError, MessagingEntityNotFoundError
from proton import Described, Message
from support.sdk import drain
from support.tokens import bare_connection

from sbdlq.emulator.amqp import rule_ops


def _status(status_code: int, message: Any, description: str, amqp_transport: Any) -> tuple[int, Any]:
    """A callback that returns what came back instead of raising on non-200."""
    return status_code, message.value


@pytest.fixture
def rule_receiver(emulator: Any, client: Any) -> Iterator[tuple[str, Any]]:
    topic = emulator.topic("sub")
    with client.get_subscription_receiver(topic, "sub") as receiver:
        yield topic, receiver


def _call(receiver: Any, operation: bytes, body: dict[str, Any], callback: Any = mgmt_handlers.default) -> Any:
    return receiver._mgmt_request_response_with_retry(operation, body, callback)


def test_add_enumerate_and_remove_rules_through_the_sdk(emulator: Any, client: Any, rule_receiver: Any) -> None:
    topic, receiver = rule_receiver
    add = constants.REQUEST_RESPONSE_ADD_RULE_OPERATION
    _call(receiver, add, {"rule-name": "red", "rule-description": {"sql-filter": {"expression": "color = 'red'"}}})
    correlation = {"correlation-id": "c1", "label": "order", "properties": {"n": 7}}
    description = {"correlation-filter": correlation, "sql-rule-action": {"expression": "SET tagged = 'yes'"}}
    _call(receiver, add, {"rule-name": "orders", "rule-description": description})
    _call(receiver, constants.REQUEST_RESPONSE_REMOVE_RULE_OPERATION, {"rule-name": "$Default"})

    names = [r.name for r in emulator.engine.rules(f"{topic}/Subscriptions/sub")]
    assert names == ["red", "orders"]
    listed = _call(receiver, constants.REQUEST_RESPONSE_GET_RULES_OPERATION, {"top": 10, "skip": 0})
    (first, second) = listed[b"rules"]
    filter_, action, name, _created = first[b"rule-description"]
    assert (filter_, action, name) == ([b"color = 'red'"], [], b"red")  # pyamqp gives strings as bytes
    filter_, action, name, _created = second[b"rule-description"]
    assert filter_ == [b"c1", None, None, None, b"order", None, None, None, {b"n": 7}]
    assert (action, name) == ([b"SET tagged = 'yes'"], b"orders")

    # The rules route at once: only the matching messages reach the subscription.
    with client.get_topic_sender(topic) as sender:
        sender.send_messages(
            [
                ServiceBusMessage("blue", application_properties={"color": "blue"}),
                ServiceBusMessage("red", application_properties={"color": "red"}),
                ServiceBusMessage("o", correlation_id="c1", subject="order", application_properties={"n": 7}),
            ]
        )
    got = drain(receiver, 2)
    assert sorted(str(m) for m in got) == ["o", "red"]
    tagged = {str(m): m.application_properties.get(b"tagged") for m in got}
    assert tagged == {"red": None, "o": b"yes"}
    for m in got:
        receiver.complete_message(m)


def test_rule_errors_map_to_sdk_exceptions(rule_receiver: Any) -> None:
    _topic, receiver = rule_receiver
    add = constants.REQUEST_RESPONSE_ADD_RULE_OPERATION
    with pytest.raises(MessagingEntityAlreadyExistsError):
        _call(receiver, add, {"rule-name": "$default", "rule-description": {"sql-filter": {"expression": "1=1"}}})
    with pytest.raises(MessagingEntityNotFoundError):
        _call(receiver, constants.REQUEST_RESPONSE_REMOVE_RULE_OPERATION, {"rule-name": "nope"})
    status, _ = _call(
        receiver, add, {"rule-name": "bad", "rule-description": {"sql-filter": {"expression": "a ="}}}, _status
    )
    assert status == 400
    _call(receiver, constants.REQUEST_RESPONSE_REMOVE_RULE_OPERATION, {"rule-name": "$Default"})
    status, _ = _call(receiver, constants.REQUEST_RESPONSE_GET_RULES_OPERATION, {"top": 10, "skip": 0}, _status)
    assert status == 204


def test_enumerate_rules_sends_the_described_types(emulator: Any) -> None:
    topic = emulator.topic("sub")
    emulator.engine.remove_rule(f"{topic}/Subscriptions/sub", "$Default")
    from sbdlq.emulator.engine import Rule

    for rule in (Rule.true("t"), Rule.false("f"), Rule("s", sql="a > 1", action="SET b = 1")):
        emulator.engine.add_rule(f"{topic}/Subscriptions/sub", rule)
    emulator.engine.add_rule(f"{topic}/Subscriptions/sub", Rule("c", correlation={"Subject": "x"}))
    conn = bare_connection(emulator.port)
    try:
        node = f"{topic}/Subscriptions/sub/$management"
        replies = conn.create_receiver(node, name="rules-reply", credit=10)
        request = Message(
            id=uuid.uuid4(),
            reply_to="rules-reply",
            properties={"operation": rule_ops.ENUMERATE_RULES},
            body={"top": 2, "skip": 1},
        )
        conn.create_sender(node).send(request)
        reply = replies.receive(timeout=30)
    finally:
        conn.close()
    assert reply.properties["statusCode"] == 200
    first, second = (entry["rule-description"] for entry in reply.body["rules"])
    for described in (first, second):
        assert isinstance(described, Described) and described.descriptor == rule_ops.RULE_DESCRIPTION_CODE
    assert first.value[0].descriptor == rule_ops.FALSE_FILTER_CODE
    assert first.value[1].descriptor == rule_ops.EMPTY_ACTION_CODE
    assert second.value[0].descriptor == rule_ops.SQL_FILTER_CODE and second.value[0].value == ["a > 1"]
    assert second.value[1].descriptor == rule_ops.SQL_ACTION_CODE and second.value[2] == "s"


def test_true_false_and_parameters_through_add_and_enumerate(emulator: Any, client: Any, rule_receiver: Any) -> None:
    """The SDKs send TrueRuleFilter / FalseRuleFilter as sql-filter 1=1 / 1=0: enumerate-rules hands them
    back as the true and false filters; a sql-filter's `parameters` give its `@name`s their values."""
    topic, receiver = rule_receiver
    add = constants.REQUEST_RESPONSE_ADD_RULE_OPERATION
    _call(receiver, constants.REQUEST_RESPONSE_REMOVE_RULE_OPERATION, {"rule-name": "$Default"})
    _call(receiver, add, {"rule-name": "none", "rule-description": {"sql-filter": {"expression": "1=0"}}})
    _call(receiver, add, {"rule-name": "all", "rule-description": {"sql-filter": {"expression": "1 = 1"}}})
    red = {"expression": "color = @color", "parameters": {"@color": "red"}}
    action = {"expression": "SET seen = @by", "parameters": {"@by": "rule"}}
    _call(receiver, add, {"rule-name": "red", "rule-description": {"sql-filter": red, "sql-rule-action": action}})
    rules = {r.name: r for r in emulator.engine.rules(f"{topic}/Subscriptions/sub")}
    assert (rules["none"].constant, rules["all"].constant, rules["red"].constant) == (False, True, None)
    assert (rules["red"].parameters, rules["red"].action_parameters) == ({"@color": "red"}, {"@by": "rule"})

    conn = bare_connection(emulator.port)
    try:
        node = f"{topic}/Subscriptions/sub/$management"
        replies = conn.create_receiver(node, name="rules-reply", credit=10)
        request = Message(
            id=uuid.uuid4(), reply_to="rules-reply", properties={"operation": rule_ops.ENUMERATE_RULES}, body={}
        )
        conn.create_sender(node).send(request)
        reply = replies.receive(timeout=5)
    finally:
        conn.close()
    codes = [entry["rule-description"].value[0].descriptor for entry in reply.body["rules"]]
    assert codes == [rule_ops.FALSE_FILTER_CODE, rule_ops.TRUE_FILTER_CODE, rule_ops.SQL_FILTER_CODE]

    _call(receiver, constants.REQUEST_RESPONSE_REMOVE_RULE_OPERATION, {"rule-name": "all"})
    with client.get_topic_sender(topic) as sender:
        sender.send_messages([ServiceBusMessage(c, application_properties={"color": c}) for c in ("blue", "red")])
    (got,) = receiver.receive_messages(max_message_count=2, max_wait_time=5)
    assert (str(got), got.application_properties[b"seen"]) == ("red", b"rule")
    receiver.complete_message(got)
