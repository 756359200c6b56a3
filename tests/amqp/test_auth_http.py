"""SAS keys on `$cbs`, and the HTTP side (health, admin client runtime properties)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.core.pipeline.transport import RequestsTransport
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from azure.servicebus.management import ServiceBusAdministrationClient


def test_right_key_is_accepted(keyed_emulator: Any) -> None:
    q = keyed_emulator.queue()
    with ServiceBusClient.from_connection_string(keyed_emulator.conn_str(), keep_alive=None) as client:
        with client.get_queue_sender(q) as sender:
            sender.send_messages(ServiceBusMessage("signed"))
        with client.get_queue_receiver(q) as receiver:
            (m,) = receiver.peek_messages()
            assert b"".join(m.body) == b"signed"


def test_wrong_key_is_refused(keyed_emulator: Any) -> None:
    q = keyed_emulator.queue()
    conn = keyed_emulator.conn_str(key="not-the-key")
    client = ServiceBusClient.from_connection_string(conn, keep_alive=None, retry_total=0)
    with client, pytest.raises(ServiceBusAuthenticationError), client.get_queue_sender(q) as sender:
        sender.send_messages(ServiceBusMessage("forged"))
    assert keyed_emulator.engine.counts(q).active == 0


class _PlainHttp(RequestsTransport):
    """The admin client always speaks https to the namespace host; point it at the HTTP port."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def send(self, request: Any, **kwargs: Any) -> Any:
        rest = request.url.partition("://")[2].partition("/")[2]
        request.url = f"http://127.0.0.1:{self.port}/{rest}"
        return super().send(request, **kwargs)


def test_health(emulator: Any) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{emulator.http_port}/health", timeout=5) as resp:
        payload = json.loads(resp.read())
    assert resp.status == 200
    assert payload["status"] == "ok" and payload["amqp_port"] == emulator.port


def test_admin_runtime_properties(emulator: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, "a", "b", "c")
    topic = emulator.topic("s1")
    emulator.seed(topic, "x")
    admin = ServiceBusAdministrationClient.from_connection_string(
        emulator.conn_str(), transport=_PlainHttp(emulator.http_port)
    )
    with admin:
        props = admin.get_queue_runtime_properties(q)
        assert (props.name, props.active_message_count, props.dead_letter_message_count) == (q, 3, 0)
        assert props.total_message_count == 3
        sub = admin.get_subscription_runtime_properties(topic, "s1")
        assert (sub.active_message_count, sub.transfer_dead_letter_message_count) == (1, 0)
        queue = admin.get_queue(q)
        assert queue.max_delivery_count == 10
        listed = {p.name: p.active_message_count for p in admin.list_queues_runtime_properties(max_page_size=2)}
        assert listed[q] == 3 and len(listed) == len([e for e in emulator.engine.list_entities() if e.kind == "queue"])
        (only,) = admin.list_subscriptions_runtime_properties(topic)
        assert (only.name, only.active_message_count) == ("s1", 1)
        from azure.core.exceptions import ResourceNotFoundError

        with pytest.raises(ResourceNotFoundError):
            admin.get_queue_runtime_properties("no-such-queue")


def _http(port: int, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"Host": "evil.example:5300"},
        {"Host": "127.0.0.1", "Origin": "http://evil.example"},
        {"Host": "localhost", "Origin": "null"},
    ],
    ids=["foreign host", "foreign host and port", "foreign origin", "opaque origin"],
)
def test_a_keyless_listener_answers_its_own_machine_only(emulator: Any, headers: dict[str, str]) -> None:
    """DNS rebinding: a page of another site, pointed at this port, must neither read nor delete."""
    q = emulator.queue()
    port = emulator.http_port
    assert _http(port, "DELETE", f"/{q}", headers)[0] == 403
    assert _http(port, "GET", f"/{q}", headers)[0] == 403
    assert _http(port, "GET", "/health", headers)[0] == 403
    assert emulator.engine.get_entity(q) is not None  # not deleted
    status, _ = _http(port, "GET", f"/{q}", {"Host": f"localhost:{port}", "Origin": f"http://127.0.0.1:{port}"})
    assert status == 200
