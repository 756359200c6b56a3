"""`emulator serve --quotas microsoft`: the Microsoft emulator's quotas through the real SDK and the process."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.core.exceptions import HttpResponseError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessageSizeExceededError, ServiceBusError, ServiceBusQuotaExceededError
from azure.servicebus.management import ServiceBusAdministrationClient

from sbdlq.addresses import parse_address
from sbdlq.backends.servicebus.clients import admin_transport
from sbdlq.emulator.amqp.limits import Limits
from sbdlq.emulator.engine.vocabulary import MICROSOFT, Quotas


def _admin(emu: Any) -> ServiceBusAdministrationClient:
    transport = admin_transport(10, emulator=True, port=emu.http_port)
    return ServiceBusAdministrationClient.from_connection_string(emu.conn_str(), transport=transport)


@pytest.fixture
def microsoft(launch: Any) -> Any:
    return launch(limits=Limits(quotas=MICROSOFT))


def test_the_admin_client_creates_fifty_queues_and_topics_then_is_refused(microsoft: Any) -> None:
    for i in range(48):
        microsoft.engine.create_queue(f"seeded{i}")
    with _admin(microsoft) as admin:
        admin.create_queue("q49")
        admin.create_topic("t50")
        with pytest.raises(HttpResponseError) as refused:
            admin.create_queue("q51")
        assert refused.value.status_code == 403
        assert "The maximum number of queues and topics in the namespace (50) has been reached" in str(refused.value)
        for i in range(49):
            admin.create_subscription("t50", f"s{i}")
        admin.create_subscription("t50", "s49")  # the 50th
        with pytest.raises(HttpResponseError, match=r"subscriptions on topic 't50' \(50\)") as refused:
            admin.create_subscription("t50", "s50")
        assert refused.value.status_code == 403
        with pytest.raises(HttpResponseError, match="DefaultMessageTimeToLive") as refused:
            admin.create_topic("t50", default_message_time_to_live=datetime.timedelta(hours=2))
    assert len([e for e in microsoft.engine.list_entities() if e.kind != "subscription"]) == 50


def test_messages_over_256_kb_are_refused_and_ttls_capped_at_an_hour(microsoft: Any) -> None:
    q = microsoft.queue(max_message_size_kb=1024)  # made past the quota: the quota still caps it
    with (
        ServiceBusClient.from_connection_string(microsoft.conn_str(), retry_total=0) as client,
        client.get_queue_sender(q) as sender,
    ):
        sender.send_messages(ServiceBusMessage(b"x" * (250 * 1024), time_to_live=datetime.timedelta(hours=2)))
        with pytest.raises((MessageSizeExceededError, ServiceBusError)):
            sender.send_messages(ServiceBusMessage(b"x" * (257 * 1024)))
    (m,) = microsoft.engine.peek(parse_address(q), 0, 10)
    assert (len(m.body), m.time_to_live_s) == (250 * 1024, 3600)


def test_generous_serve_takes_what_microsoft_refuses(emulator: Any) -> None:
    q = emulator.queue(max_message_size_kb=1024)
    with (
        ServiceBusClient.from_connection_string(emulator.conn_str(), retry_total=0) as client,
        client.get_queue_sender(q) as sender,
    ):
        sender.send_messages(ServiceBusMessage(b"x" * (300 * 1024), time_to_live=datetime.timedelta(hours=2)))
    (m,) = emulator.engine.peek(parse_address(q), 0, 10)
    assert m.time_to_live_s == 7200


def test_a_send_past_the_entity_size_quota_is_quota_exceeded_in_the_sdk(launch: Any) -> None:
    emu = launch(limits=Limits(quotas=Quotas(name="small", entity_bytes=2000)))
    q = emu.queue()
    with (
        ServiceBusClient.from_connection_string(emu.conn_str(), retry_total=0) as client,
        client.get_queue_sender(q) as sender,
    ):
        sender.send_messages(ServiceBusMessage(b"x" * 1500))
        with pytest.raises(ServiceBusQuotaExceededError, match="The maximum entity size has been reached"):
            sender.send_messages(ServiceBusMessage(b"x" * 600))
    assert len(emu.engine.peek(parse_address(q), 0, 10)) == 1
