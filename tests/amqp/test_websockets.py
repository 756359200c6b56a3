"""AMQP over WebSockets (`AMQPWSB10` on the HTTP port) through the unmodified SDK, with and without a proxy.

The SDK always dials port 443 for WebSockets (its `_pyamqp` connection overrides any
endpoint port), and `UseDevelopmentEmulator=true` only turns TLS off (ws:// instead of wss://).
The SDK's public `custom_endpoint_address` keyword names another host:port; the tests (and
sbdlq, for an emulator target) use it to reach `emulator serve`'s HTTP port.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue, TransportType
from azure.servicebus.aio import ServiceBusClient as AsyncClient

# The SDK passes aiohttp `ssl=None` for ws:// (its emulator path); aiohttp 3.10+ deprecates that.
# With a proxy it passes aiohttp BasicAuth/proxy_auth, which aiohttp 3.13 deprecates.
pytestmark = [
    pytest.mark.filterwarnings("ignore:ssl=None is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:BasicAuth is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The 'proxy_auth' parameter is deprecated:DeprecationWarning"),
]


def _ws_kwargs(emulator: Any, **extra: Any) -> dict[str, Any]:
    return {
        "transport_type": TransportType.AmqpOverWebsocket,
        "custom_endpoint_address": f"sb://127.0.0.1:{emulator.http_port}",
        "retry_total": 0,
        "keep_alive": None,
        **extra,
    }


async def _round_trip(conn: str, queue: str, kwargs: dict[str, Any], text: str) -> list[str]:
    async with AsyncClient.from_connection_string(conn, **kwargs) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(ServiceBusMessage(text))
        async with client.get_queue_receiver(queue) as receiver:
            got = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            await receiver.dead_letter_message(got[0], reason="ws", error_description="over websockets")
        async with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            peeked = await dlq.peek_messages(max_message_count=5)
            return [f"{b''.join(m.body).decode()} {m.dead_letter_reason}" for m in peeked]


def test_aio_sdk_over_websockets(emulator: Any) -> None:
    q = emulator.queue()
    assert asyncio.run(_round_trip(emulator.conn_str(), q, _ws_kwargs(emulator), "hello ws")) == ["hello ws ws"]


@pytest.fixture
def proxy() -> Any:
    from support.connect_proxy import ConnectProxy

    running = ConnectProxy(credentials=("op", "pr0xy-pass")).start()
    yield running
    running.stop()


def _proxy_kwargs(proxy: Any, *, scheme: str = "") -> dict[str, Any]:
    """The SDK's http_proxy dict. The async SDK hands aiohttp `proxy_hostname:proxy_port` as the
    proxy URL, which aiohttp refuses without a scheme; the sync one hands websocket-client a bare host."""
    host = scheme + "127.0.0.1"
    return {"proxy_hostname": host, "proxy_port": proxy.port, "username": "op", "password": "pr0xy-pass"}


def test_aio_sdk_over_websockets_through_a_proxy(emulator: Any, proxy: Any) -> None:
    q = emulator.queue()
    kwargs = _ws_kwargs(emulator, http_proxy=_proxy_kwargs(proxy, scheme="http://"))
    assert asyncio.run(_round_trip(emulator.conn_str(), q, kwargs, "via proxy")) == ["via proxy ws"]
    # aiohttp forwards a ws:// upgrade in absolute form, with the proxy credentials.
    assert {(s.method, s.target, s.user) for s in proxy.seen} == {
        ("GET", f"ws://127.0.0.1:{emulator.http_port}/$servicebus/websocket", "op\0pr0xy-pass")
    }


def test_proxy_refuses_wrong_credentials(emulator: Any, proxy: Any) -> None:
    from azure.servicebus.exceptions import ServiceBusError

    kwargs = _ws_kwargs(emulator, http_proxy={**_proxy_kwargs(proxy, scheme="http://"), "password": "wrong"})
    with pytest.raises(ServiceBusError):
        asyncio.run(_round_trip(emulator.conn_str(), emulator.queue(), kwargs, "never"))


@pytest.mark.parametrize("through_proxy", [False, True], ids=["direct", "connect-proxy"])
def test_sync_sdk_over_websockets(emulator: Any, proxy: Any, through_proxy: bool) -> None:
    pytest.importorskip("websocket")  # websocket-client: the sync SDK's WebSocket transport
    from azure.servicebus import ServiceBusClient

    q = emulator.queue()
    extra = {"http_proxy": _proxy_kwargs(proxy)} if through_proxy else {}
    with ServiceBusClient.from_connection_string(emulator.conn_str(), **_ws_kwargs(emulator, **extra)) as client:
        with client.get_queue_sender(q) as sender:
            sender.send_messages([ServiceBusMessage(f"sync {i}") for i in range(3)])
        with client.get_queue_receiver(q) as receiver:
            got = receiver.receive_messages(max_message_count=3, max_wait_time=5)
            assert sorted(str(m) for m in got) == ["sync 0", "sync 1", "sync 2"]
            for message in got:
                receiver.complete_message(message)
    if through_proxy:  # websocket-client tunnels with CONNECT, even to a plain ws:// URL
        assert {(s.method, s.target) for s in proxy.seen} == {("CONNECT", f"127.0.0.1:{emulator.http_port}")}
    else:
        assert proxy.seen == []


# ---------------------------------------------------------------- the sbdlq CLI over WebSockets


def _dead_lettered(emulator: Any, *bodies: str) -> str:
    """A fresh queue whose DLQ holds bodies (reason `Bad`)."""
    from sbdlq.addresses import Address, parse_entity
    from sbdlq.models import OutboundMessage

    q = emulator.queue()
    main = Address(parse_entity(q))
    emulator.engine.send(q, [OutboundMessage(body=b.encode(), message_id=b) for b in bodies])
    got = emulator.engine.receive(main, len(bodies))
    assert emulator.engine.dead_letter(main, [m.lock_token for m in got], "Bad", "it broke") == []
    return q


def test_cli_peek_over_websockets(emulator: Any, cli: Any) -> None:
    q = _dead_lettered(emulator, "a", "b")
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(emulator.http_port), "SBDLQ_TRANSPORT": "websockets"}
    code, out, err = cli.bare("--connection-string", emulator.conn_str(), "peek", q, "-o", "jsonl", env=env)
    assert (code, err) == (0, "")
    assert [json.loads(line)["body"] for line in out.splitlines()] == ["a", "b"]


def test_cli_through_a_proxy_never_prints_its_password(emulator: Any, proxy: Any, cli: Any) -> None:
    q = _dead_lettered(emulator, "via proxy")
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(emulator.http_port)}
    args = ("--connection-string", emulator.conn_str(), "peek", q, "-o", "jsonl", "-v")
    code, out, err = cli.bare(*args, "--proxy", proxy.url("op", "pr0xy-pass"), env=env)
    assert code == 0, err
    assert [json.loads(line)["body"] for line in out.splitlines()] == ["via proxy"]
    assert f"sbdlq: network: AMQP over WebSockets (443), proxy http://***@127.0.0.1:{proxy.port}\n" in err
    assert "pr0xy-pass" not in err and "op:" not in err
    assert ("GET", f"ws://127.0.0.1:{emulator.http_port}/$servicebus/websocket") in {
        (s.method, s.target) for s in proxy.seen
    }


def test_cli_wrong_proxy_password_is_one_line_without_it(emulator: Any, proxy: Any, cli: Any) -> None:
    q = emulator.queue()
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(emulator.http_port), "HTTPS_PROXY": proxy.url("op", "wrong-password")}
    # A long timeout: the refusal comes at once, and a busy machine must not turn it into a timeout.
    args = ("--connection-string", emulator.conn_str(), "--transport", "websockets", "--timeout", "60s")
    code, out, err = cli.bare(*args, "peek", q, env=env)
    assert (code, out) == (1, "")
    assert err == (
        f"sbdlq: {q}: Handler failed: 407, message='Invalid response status', "
        f"url='ws://127.0.0.1:{emulator.http_port}/$servicebus/websocket'.\n"
    )
