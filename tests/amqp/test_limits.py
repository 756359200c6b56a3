"""`emulator serve` under --key and against hostile clients: sub-queue grants, token expiry,
request caps, admission timeout, connection cap, and the HTTP side's timeouts."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("proton")

import raw_amqp
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusError

from sbdlq.addresses import parse_address
from sbdlq.emulator.amqp import guard
from sbdlq.emulator.amqp.limits import HTTP_TIMEOUT_S, Limits

KEY = "limits-key"


def _sb(emu: Any) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(emu.conn_str(), keep_alive=None, retry_total=0)


def test_dead_letter_receivers_work_under_a_key(keyed_emulator: Any) -> None:
    q = keyed_emulator.queue()
    topic = keyed_emulator.topic("s")
    keyed_emulator.seed(q, "to-dlq")
    keyed_emulator.seed(topic, "sub-dlq")
    with _sb(keyed_emulator) as client:
        for receiver in (client.get_queue_receiver(q), client.get_subscription_receiver(topic, "s")):
            with receiver:
                (m,) = receiver.receive_messages(max_wait_time=5)
                receiver.dead_letter_message(m, reason="bad")
        dlqs = (
            client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER),
            client.get_subscription_receiver(topic, "s", sub_queue=ServiceBusSubQueue.DEAD_LETTER),
        )
        for dlq in dlqs:
            with dlq:
                (m,) = dlq.receive_messages(max_wait_time=5)
                assert m.dead_letter_reason == "bad"
                dlq.complete_message(m)
    assert keyed_emulator.engine.counts(q).dead_letter == 0
    assert keyed_emulator.engine.counts(f"{topic}/Subscriptions/s").dead_letter == 0


def test_sub_queue_grants_do_not_widen() -> None:
    from sbdlq.emulator.amqp import cbs, sas

    dlq, entity, namespace = sas.Grant("/orders/$DeadLetterQueue", 100.0), sas.Grant("orders", 100.0), sas.Grant("")
    assert cbs.authorized([dlq], "orders/$DeadLetterQueue", 50) and not cbs.authorized([dlq], "orders", 50)
    assert cbs.authorized([entity], "orders/$Transfer/$DeadLetterQueue", 50)
    assert cbs.authorized([sas.Grant("t")], "t/Subscriptions/s/$DeadLetterQueue", 50)
    assert cbs.authorized([namespace], "anything/$DeadLetterQueue", 50)
    assert not cbs.authorized([entity], "orders", 100.0)  # expired at its `se`


class _Clock:
    """A wall clock a test can move forward."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew


class _Heard(logging.Handler):
    """Sets `seen` when a record containing `text` is logged (an event to wait on, not a sleep)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


@contextlib.contextmanager
def _listening(logger: logging.Logger, text: str) -> Iterator[threading.Event]:
    heard, level = _Heard(text), logger.level
    logger.addHandler(heard)
    logger.setLevel(logging.INFO)
    try:
        yield heard.seen
    finally:
        logger.removeHandler(heard)
        logger.setLevel(level)


def test_links_are_detached_when_their_token_expires(launch: Any) -> None:
    clock = _Clock()
    emu = launch(key=KEY, clock=clock)
    q = emu.queue()
    with (
        _listening(guard.log, "expired: link detached") as detached,
        _sb(emu) as client,
        client.get_queue_sender(q) as sender,
    ):
        sender.send_messages(ServiceBusMessage("before"))
        clock.skew = 2 * 3600.0  # the SDK's one-hour token is now stale, and so is any it puts
        assert detached.wait(60), "the listener did not detach the link"  # on its next tick
        with pytest.raises((ServiceBusAuthenticationError, ServiceBusError)):
            sender.send_messages(ServiceBusMessage("after"))
    assert [m.body for m in emu.engine.peek(parse_address(q), 0, 10)] == [b"before"]


def test_cbs_requests_are_capped(emulator: Any) -> None:
    answer = raw_amqp.cbs_flood(emulator.port, 2_000_000)
    assert b"amqp:link:message-size-exceeded" in answer


def test_unauthenticated_connections_are_closed(launch: Any) -> None:
    emu = launch(key=KEY, limits=Limits(auth_timeout_s=0.5))
    with raw_amqp.connect(emu.port) as idle:
        idle.sendall(raw_amqp.SASL_HEADER)
        idle.settimeout(60)  # a hang guard: a connection that is never closed times out here
        while idle.recv(4096):
            pass


def test_connection_cap(launch: Any) -> None:
    """A connection over the cap gets an AMQP open and a close saying why, not a TCP reset."""
    # The auth timeout is long: within the wait below, only the cap can close a connection.
    emu = launch(limits=Limits(max_connections=3, auth_timeout_s=600))
    held = [raw_amqp.connect(emu.port) for _ in range(3)]
    try:
        # The listener accepts in arrival order, so the fourth is the one over the cap.
        with raw_amqp.connect(emu.port) as extra:
            extra.sendall(raw_amqp.sasl_anonymous() + raw_amqp.frame(raw_amqp.OPEN, ["over-the-cap"]))
            answer = raw_amqp.wait_for(extra, b"retry.")
            frames = {code: fields for code, fields, _ in raw_amqp.performatives(answer)}
            assert raw_amqp.OPEN in frames
            condition, description = frames[0x18][0].value[:2]  # close(error)
            assert condition == "amqp:resource-limit-exceeded"
            assert description == (
                "The maximum number of concurrent connections (3) has been reached: close a connection and retry."
            )
            extra.settimeout(60)
            while extra.recv(4096):  # then the connection ends (a hang guard: 60 s)
                pass
        for sock in held:  # the three within the cap are still open
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in held:
            sock.close()


def test_the_sdk_over_the_connection_cap_is_told_why(launch: Any) -> None:
    """The SDK reports a connection closed with an error as ServiceBusConnectionError, with the text."""
    from azure.servicebus.exceptions import ServiceBusConnectionError

    emu = launch(limits=Limits(max_connections=1, auth_timeout_s=600))
    q = emu.queue()
    refused = pytest.raises(ServiceBusConnectionError, match=r"connections \(1\) has been reached.*resource-limit")
    # the sender opens its connection on entry, and is refused there
    with raw_amqp.connect(emu.port), _sb(emu) as sb, refused, sb.get_queue_sender(q) as sender:
        sender.send_messages(ServiceBusMessage("over the cap"))
    assert emu.engine.counts(q).active == 0


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        # Under the listener's HTTP timeout: a reply that waited for an idle client to time out
        # first would come too late.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=HTTP_TIMEOUT_S / 2) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_http_serves_beside_an_idle_connection_and_refuses_bad_paging(emulator: Any) -> None:
    with socket.create_connection(("127.0.0.1", emulator.http_port)):
        status, body = _get(emulator.http_port, "/health")
        assert status == 200 and json.loads(body)["store"] == emulator.store
        status, body = _get(emulator.http_port, "/$Resources/queues?$skip=abc")
        assert status == 400 and b"$skip" in body


def test_health_hides_the_store_under_a_key(keyed_emulator: Any) -> None:
    status, body = _get(keyed_emulator.http_port, "/health")
    assert status == 200 and "store" not in json.loads(body)


def test_headers_trickled_a_byte_at_a_time_cannot_hold_the_http_slots(launch: Any) -> None:
    """Slowloris: each read is quick, the headers never end. A deadline for the whole header cuts
    such clients off, so their slots come back and /health answers again."""
    emu = launch(limits=Limits(http_max_clients=2, http_timeout_s=1.0))
    closed: list[bool] = []
    stop = threading.Event()

    def trickle() -> None:
        sock = socket.create_connection(("127.0.0.1", emu.http_port), timeout=30)
        try:
            for byte in b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 10_000:
                if stop.is_set():
                    return
                sock.sendall(bytes([byte]))
                stop.wait(0.2)
        except OSError:
            closed.append(True)  # the listener cut it off
        finally:
            sock.close()

    slow = [threading.Thread(target=trickle, daemon=True) for _ in range(2)]
    for t in slow:
        t.start()
    try:
        for t in slow:
            t.join(30)
        assert closed == [True, True], "the trickling clients were not cut off"
        with urllib.request.urlopen(f"http://127.0.0.1:{emu.http_port}/health", timeout=10) as r:
            assert json.loads(r.read())["status"] == "ok"
    finally:
        stop.set()


def test_keyless_connections_that_put_no_token_are_closed_too(launch: Any) -> None:
    """Without --key, an opened connection that never puts a token is closed at the auth timeout."""
    emu = launch(limits=Limits(auth_timeout_s=0.5))
    with raw_amqp.connect(emu.port) as idle:
        idle.sendall(raw_amqp.sasl_anonymous() + raw_amqp.open_session())
        idle.settimeout(60)  # a hang guard: a connection that is never closed times out here
        while idle.recv(4096):
            pass
