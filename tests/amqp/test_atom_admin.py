"""The ATOM management API on the HTTP port, through the official administration client.

The client is unmodified except for its transport: sbdlq's plain-HTTP admin transport
(sbdlq/backends/servicebus/clients.py), the one the sbdlq CLI itself uses.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus import ServiceBusMessage
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

from sbdlq.addresses import parse_address
from sbdlq.backends.servicebus.clients import admin_transport


def _admin(emulator: Any, key: str | None = None) -> ServiceBusAdministrationClient:
    transport = admin_transport(10, emulator=True, port=emulator.http_port)
    return ServiceBusAdministrationClient.from_connection_string(emulator.conn_str(key), transport=transport)


@pytest.fixture
def admin(emulator: Any) -> Iterator[ServiceBusAdministrationClient]:
    with _admin(emulator) as client:
        yield client


def test_queue_create_get_update_list_delete(emulator: Any, admin: Any, client: Any) -> None:
    created = admin.create_queue(
        "atom-q", max_delivery_count=3, lock_duration=datetime.timedelta(seconds=30), requires_session=False
    )
    assert (created.name, created.max_delivery_count, created.lock_duration) == (
        "atom-q",
        3,
        datetime.timedelta(seconds=30),
    )
    # Config.json's defaults for what was not given.
    info = emulator.engine.get_entity("atom-q")
    assert (info.max_delivery_count, info.lock_duration_s, info.dead_lettering_on_expiration) == (3, 30, False)
    with pytest.raises(ResourceExistsError):
        admin.create_queue("atom-q")

    queue = admin.get_queue("atom-q")
    queue.max_delivery_count = 7
    queue.dead_lettering_on_message_expiration = True
    admin.update_queue(queue)
    again = admin.get_queue("atom-q")
    assert (again.max_delivery_count, again.dead_lettering_on_message_expiration) == (7, True)
    assert again.lock_duration == datetime.timedelta(seconds=30)
    assert "atom-q" in [q.name for q in admin.list_queues()]

    # Usable over AMQP at once.
    with client.get_queue_sender("atom-q") as sender:
        sender.send_messages(ServiceBusMessage("hello"))
    assert admin.get_queue_runtime_properties("atom-q").active_message_count == 1

    admin.delete_queue("atom-q")
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue("atom-q")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_queue("atom-q")


def test_update_of_a_missing_queue_is_not_found(admin: Any) -> None:
    admin.create_queue("atom-gone")
    queue = admin.get_queue("atom-gone")
    admin.delete_queue("atom-gone")
    with pytest.raises(ResourceNotFoundError):
        admin.update_queue(queue)


def test_forwarding_names_an_entity(emulator: Any, admin: Any) -> None:
    admin.create_queue("atom-dest")
    admin.create_queue("atom-src", forward_to="atom-dest", forward_dead_lettered_messages_to="atom-dest")
    info = emulator.engine.get_entity("atom-src")
    assert (info.forward_to, info.forward_dead_lettered_to) == ("atom-dest", "atom-dest")
    with pytest.raises(ResourceNotFoundError):
        admin.create_queue("atom-src2", forward_to="atom-nowhere")


def test_topic_subscription_and_rules(emulator: Any, admin: Any, client: Any) -> None:
    topic = admin.create_topic("atom-t", default_message_time_to_live=datetime.timedelta(hours=1))
    assert topic.default_message_time_to_live == datetime.timedelta(hours=1)
    topic = admin.get_topic("atom-t")
    topic.requires_duplicate_detection = True
    admin.update_topic(topic)
    assert admin.get_topic("atom-t").requires_duplicate_detection is True
    assert "atom-t" in [t.name for t in admin.list_topics()]

    sub = admin.create_subscription("atom-t", "s1", max_delivery_count=4)
    assert sub.max_delivery_count == 4
    sub.lock_duration = datetime.timedelta(seconds=45)
    admin.update_subscription("atom-t", sub)
    assert admin.get_subscription("atom-t", "s1").lock_duration == datetime.timedelta(seconds=45)
    with pytest.raises(ResourceExistsError):
        admin.create_subscription("atom-t", "s1")
    assert [s.name for s in admin.list_subscriptions("atom-t")] == ["s1"]

    admin.delete_rule("atom-t", "s1", "$Default")
    red = admin.create_rule(
        "atom-t", "s1", "red", filter=SqlRuleFilter("color = 'red'"), action=SqlRuleAction("SET hit = 1")
    )
    assert red.filter.sql_expression == "color = 'red'"
    admin.create_rule(
        "atom-t", "s1", "orders", filter=CorrelationRuleFilter(label="order", properties={"n": 7, "ok": True})
    )
    with pytest.raises(ResourceExistsError):
        admin.create_rule("atom-t", "s1", "red")
    rule = admin.get_rule("atom-t", "s1", "orders")
    assert (rule.filter.label, rule.filter.properties) == ("order", {"n": 7, "ok": True})
    red = admin.get_rule("atom-t", "s1", "red")
    red.filter = SqlRuleFilter("color = 'crimson'")
    admin.update_rule("atom-t", "s1", red)
    assert [r.name for r in admin.list_rules("atom-t", "s1")] == ["red", "orders"]
    assert admin.get_rule("atom-t", "s1", "red").filter.sql_expression == "color = 'crimson'"

    # The rules route at once.
    with client.get_topic_sender("atom-t") as sender:
        sender.send_messages(
            [
                ServiceBusMessage("no", application_properties={"color": "red"}),
                ServiceBusMessage("yes", application_properties={"color": "crimson"}),
                ServiceBusMessage("order", subject="order", application_properties={"n": 7, "ok": True}),
            ]
        )
    assert admin.get_subscription_runtime_properties("atom-t", "s1").active_message_count == 2

    admin.delete_rule("atom-t", "s1", "orders")
    with pytest.raises(ResourceNotFoundError):
        admin.get_rule("atom-t", "s1", "orders")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_rule("atom-t", "s1", "orders")
    admin.delete_subscription("atom-t", "s1")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription("atom-t", "s1")
    admin.delete_topic("atom-t")
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic("atom-t")


def test_keyed_listener_needs_a_valid_token(keyed_emulator: Any) -> None:
    with _admin(keyed_emulator, key="not-the-key") as forged, pytest.raises(ClientAuthenticationError):
        forged.create_queue("atom-forged")
    with _admin(keyed_emulator) as admin:
        admin.create_queue("atom-signed")
        assert admin.get_queue("atom-signed").name == "atom-signed"
        admin.delete_queue("atom-signed")
    assert "atom-signed" not in [e.path for e in keyed_emulator.engine.list_entities()]


def test_aio_admin_client(emulator: Any) -> None:
    import asyncio

    from azure.core.pipeline.transport import AioHttpTransport
    from azure.servicebus.aio.management import ServiceBusAdministrationClient as AsyncAdmin

    from sbdlq.backends.servicebus.clients import admin_http_url

    class PlainHttp(AioHttpTransport):  # type: ignore[misc]
        async def send(self, request: Any, **kwargs: Any) -> Any:
            request.url = admin_http_url(request.url, emulator.http_port)
            return await super().send(request, **kwargs)

    async def run() -> list[str]:
        async with AsyncAdmin.from_connection_string(emulator.conn_str(), transport=PlainHttp()) as admin:
            await admin.create_queue("atom-aio", max_delivery_count=2)
            names = [q.name async for q in admin.list_queues()]
            assert (await admin.get_queue("atom-aio")).max_delivery_count == 2
            await admin.delete_queue("atom-aio")
            return names

    assert "atom-aio" in asyncio.run(run())


def test_readme_admin_snippet_runs(emulator: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/emulator.md's admin client snippet ("Use the emulator from your app"), pointed at this
    listener's ports."""
    import re

    from support.readme import page_of, section

    assert page_of("# Use the emulator from your app") == "docs/emulator.md"
    # The page's only Python block (the TLS one, which needs serve --tls, is docs/tls.md's).
    (snippet,) = re.findall(r"```python\n(.*?)```", section("# Use the emulator from your app"), re.S)
    code = snippet.replace("localhost:5300", f"127.0.0.1:{emulator.http_port}")
    code = code.replace("sb://localhost;", f"sb://127.0.0.1:{emulator.port};")
    exec(compile(code, "docs/emulator.md", "exec"), {})
    assert capsys.readouterr().out == "0\n"
    assert emulator.engine.rules("readme-events/Subscriptions/audit")[-1].sql == "priority > 2"


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("MaxDeliveryCount", "99999999999999999999", "MaxDeliveryCount must be at most 2147483647"),
        ("LockDuration", "P99999999D", "LockDuration must be at most 5 minutes (PT5M)"),
        ("LockDuration", "PT6M", "LockDuration must be at most 5 minutes (PT5M)"),
    ],
)
def test_an_entity_property_past_the_service_limits_is_refused(emulator: Any, name: str, value: str, why: str) -> None:
    """As the CLI refuses them: a huge MaxDeliveryCount was an HTTP 500, a huge LockDuration was
    taken and then failed every receive ("year 31254 is out of range")."""
    import http.client

    body = (
        '<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
        '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">'
        f"<{name}>{value}</{name}></QueueDescription></content></entry>"
    )
    conn = http.client.HTTPConnection("127.0.0.1", emulator.http_port, timeout=5)
    try:
        conn.request("PUT", f"/limits-{name.lower()}-{len(value)}", body=body, headers={"Host": "localhost"})
        response = conn.getresponse()
        detail = response.read().decode()
    finally:
        conn.close()
    assert response.status == 400, detail
    assert why in detail


def test_rule_parameters_and_true_false_filters_keep_their_types(emulator: Any, admin: Any, client: Any) -> None:
    from azure.servicebus.management import FalseRuleFilter, TrueRuleFilter

    admin.create_topic("atom-p")
    admin.create_subscription("atom-p", "s")
    admin.delete_rule("atom-p", "s", "$Default")
    when = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    parameters = {"@color": "red", "@n": 2, "@big": 2**40, "@ratio": 0.5, "@on": True, "@before": when}
    sql = "color = @color AND n >= @n AND big = @big AND ratio = @ratio AND on = @on AND at < @before"
    created = admin.create_rule(
        "atom-p", "s", "p", filter=SqlRuleFilter(sql, parameters=parameters),
        action=SqlRuleAction("SET hit = @hit", parameters={"@hit": "yes"}),
    )  # fmt: skip
    assert created.filter.parameters == parameters
    admin.create_rule("atom-p", "s", "all", filter=TrueRuleFilter())
    admin.create_rule("atom-p", "s", "none", filter=FalseRuleFilter())
    admin.create_rule("atom-p", "s", "sql-zero", filter=SqlRuleFilter("1=0"))

    got = {r.name: r for r in admin.list_rules("atom-p", "s")}
    assert [type(got[n].filter).__name__ for n in ("p", "all", "none", "sql-zero")] == [
        "SqlRuleFilter",
        "TrueRuleFilter",
        "FalseRuleFilter",
        "SqlRuleFilter",
    ]
    rule = admin.get_rule("atom-p", "s", "p")
    assert (rule.filter.sql_expression, rule.filter.parameters) == (sql, parameters)
    assert (rule.action.sql_expression, rule.action.parameters) == ("SET hit = @hit", {"@hit": "yes"})
    assert type(admin.get_rule("atom-p", "s", "none").filter).__name__ == "FalseRuleFilter"
    assert type(admin.get_rule("atom-p", "s", "all").filter).__name__ == "TrueRuleFilter"
    engine_rules = {r.name: r for r in emulator.engine.rules("atom-p/Subscriptions/s")}
    assert (engine_rules["all"].constant, engine_rules["none"].constant, engine_rules["sql-zero"].constant) == (
        True,
        False,
        None,
    )

    # The parameters route: only the matching message takes the action.
    admin.delete_rule("atom-p", "s", "all")
    rule.filter = SqlRuleFilter("color = @color AND n >= @n", parameters={"@color": "red", "@n": 2})
    admin.update_rule("atom-p", "s", rule)
    assert admin.get_rule("atom-p", "s", "p").filter.parameters == {"@color": "red", "@n": 2}
    with client.get_topic_sender("atom-p") as sender:
        sender.send_messages(
            [
                ServiceBusMessage("no", application_properties={"color": "red", "n": 1}),
                ServiceBusMessage("yes", application_properties={"color": "red", "n": 3}),
                ServiceBusMessage("blue", application_properties={"color": "blue", "n": 3}),
            ]
        )
    (message,) = emulator.engine.peek(parse_address("atom-p/Subscriptions/s"), 0, 10)
    assert (message.body, message.application_properties["hit"]) == (b"yes", "yes")

    with pytest.raises(HttpResponseError):
        admin.create_rule("atom-p", "s", "bad", filter=SqlRuleFilter("a = @missing", parameters={"@other": 1}))
    admin.delete_topic("atom-p")
