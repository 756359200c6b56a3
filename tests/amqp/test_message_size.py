"""Maximum message size on the wire: advertised on attach, batches sized by it, oversized
deliveries refused with amqp:link:message-size-exceeded before they are buffered."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

import raw_amqp
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessageSizeExceededError
from proton import Delivery, Message
from proton.utils import SendException
from support.tokens import bare_connection

from sbdlq.addresses import parse_address
from sbdlq.emulator.amqp.limits import Limits

STANDARD = 256 * 1024


def _sb(emu: Any) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(emu.conn_str(), keep_alive=None, retry_total=0)


def test_the_sdk_reads_256_kb_from_the_attach_and_an_oversized_message_is_refused(emulator: Any) -> None:
    q = emulator.queue()
    with _sb(emulator) as client, client.get_queue_sender(q) as sender:
        assert sender.create_message_batch().max_size_in_bytes == STANDARD
        sender.send_messages(ServiceBusMessage(b"x" * 250_000))
        with pytest.raises(MessageSizeExceededError, match=r"exceeds the limit \(262144 bytes\)"):
            sender.send_messages(ServiceBusMessage(b"x" * 300_000))
        with pytest.raises(MessageSizeExceededError):  # the SDK's own check on batches
            sender.create_message_batch().add_message(ServiceBusMessage(b"x" * 300_000))
        sender.send_messages(ServiceBusMessage(b"after"))  # the link is still fine
    assert [len(m.body) for m in emulator.engine.peek(parse_address(q), 0, 10)] == [250_000, 5]


def test_a_batch_filled_to_the_limit_is_accepted(emulator: Any) -> None:
    q = emulator.queue()
    with _sb(emulator) as client, client.get_queue_sender(q) as sender:
        batch = sender.create_message_batch()
        added = 0
        with pytest.raises((MessageSizeExceededError, ValueError)):
            while True:
                batch.add_message(ServiceBusMessage(b"y" * 10_000, application_properties={"n": added}))
                added += 1
        assert 20 < added < 27 and batch.size_in_bytes <= STANDARD
        sender.send_messages(batch)
    assert emulator.engine.counts(q).active == added


def test_a_configured_limit_is_what_the_attach_advertises(emulator: Any) -> None:
    q = emulator.queue(max_message_size_kb=1024)
    with _sb(emulator) as client, client.get_queue_sender(q) as sender:
        assert sender.create_message_batch().max_size_in_bytes == 1024 * 1024
        sender.send_messages(ServiceBusMessage(b"z" * 600_000))
    assert emulator.engine.counts(q).active == 1


def test_a_bare_proton_sender_ignoring_the_limit_is_refused_and_keeps_its_link(emulator: Any) -> None:
    q = emulator.queue(max_message_size_kb=64)
    conn = bare_connection(emulator.port)
    try:
        sender = conn.create_sender(q)
        assert sender.link.remote_max_message_size == 64 * 1024  # advertised, never 0
        sender.send(Message(body=b"fits"))
        with pytest.raises(SendException) as refused:
            sender.send(Message(body=b"x" * 200_000))
        assert refused.value.state == Delivery.REJECTED
        sender.send(Message(body=b"still attached"))
    finally:
        conn.close()
    bodies = [m.body for m in emulator.engine.peek(parse_address(q), 0, 10)]  # amqp-value sections
    assert len(bodies) == 2 and bodies[0].endswith(b"fits") and bodies[1].endswith(b"still attached")


def test_a_delivery_that_never_ends_is_detached_past_the_discard_bound(launch: Any) -> None:
    emu = launch(limits=Limits(discard_max_bytes=2_000_000))
    q = emu.queue()
    answer = raw_amqp.cbs_flood(emu.port, 10_000_000, address=q)
    assert b"amqp:link:message-size-exceeded" in answer
    assert emu.engine.counts(q).active == 0


def test_receivers_and_request_links_advertise_a_size_too(emulator: Any) -> None:
    q = emulator.queue()
    conn = bare_connection(emulator.port)
    try:
        assert conn.create_receiver(q, credit=0).link.remote_max_message_size == STANDARD
        assert conn.create_sender(f"{q}/$management").link.remote_max_message_size == 64 * 1024
        assert conn.create_sender("$cbs").link.remote_max_message_size == 64 * 1024
        assert conn.create_receiver(f"{q}/$management", credit=1).link.remote_max_message_size > 0
    finally:
        conn.close()


def _rss_kb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1))  # type: ignore[union-attr]


def test_a_30_mb_message_is_read_and_dropped_as_it_arrives(emulator: Any) -> None:
    """A client streaming one 30 MB delivery to a 256 KB queue: rejected at its end, never buffered."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read memory")
    q = emulator.queue()
    before = _rss_kb()
    answer = raw_amqp.cbs_flood(emulator.port, 30_000_000, address=q, end=True)
    assert b"amqp:link:message-size-exceeded" in answer
    assert re.search(rb"size:30\d{6} bytes\) exceeds the limit \(262144 bytes\)", answer)
    assert _rss_kb() - before < 24 * 1024  # the server shares this process; 30 MB buffered would show
    assert emulator.engine.counts(q).active == 0
