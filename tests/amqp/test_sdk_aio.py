"""The unmodified azure-servicebus SDK (asyncio) against `sbdlq emulator serve`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessagingEntityNotFoundError
from support.sdk import WAIT


async def _drain(receiver: Any, expected: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(expected + 2):
        batch = await receiver.receive_messages(max_message_count=expected - len(got), max_wait_time=WAIT)
        got.extend(batch)
        if len(got) >= expected or not batch:
            break
    return got


def _text(message: Any) -> str:
    return b"".join(message.body).decode()


def test_aio_send_settle_and_dead_letter(emulator: Any) -> None:
    q = emulator.queue()

    async def scenario() -> None:
        async with ServiceBusClient.from_connection_string(emulator.conn_str(), keep_alive=None) as client:
            async with client.get_queue_sender(q) as sender:
                batch = await sender.create_message_batch()
                for text in ("done", "retry", "poison", "later"):
                    batch.add_message(ServiceBusMessage(text))
                await sender.send_messages(batch)
            async with client.get_queue_receiver(q) as receiver:
                done, retry, poison, later = await _drain(receiver, 4)
                assert [_text(m) for m in (done, retry, poison, later)] == ["done", "retry", "poison", "later"]
                await receiver.complete_message(done)
                await receiver.abandon_message(retry)
                await receiver.dead_letter_message(poison, reason="Invalid", error_description="bad json")
                await receiver.defer_message(later)
                renewed = await receiver.renew_message_lock(again := (await _drain(receiver, 1))[0])
                assert _text(again) == "retry" and again.delivery_count == 1 and renewed is not None
                await receiver.complete_message(again)
                (deferred,) = await receiver.receive_deferred_messages([later.sequence_number])
                await receiver.complete_message(deferred)
                peeked = await receiver.peek_messages(max_message_count=10)
                assert peeked == []
            async with client.get_queue_receiver(
                q, sub_queue=ServiceBusSubQueue.DEAD_LETTER, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
            ) as dlq:
                (dead,) = await _drain(dlq, 1)
                assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("Invalid", "bad json")

    asyncio.run(scenario())
    counts = emulator.engine.counts(q)
    assert (counts.active, counts.dead_letter) == (0, 0)


def test_aio_entity_not_found(emulator: Any) -> None:
    async def scenario() -> None:
        async with ServiceBusClient.from_connection_string(
            emulator.conn_str(), keep_alive=None, retry_total=0
        ) as client:
            with pytest.raises(MessagingEntityNotFoundError):
                async with client.get_queue_sender("missing-queue") as sender:
                    await sender.send_messages(ServiceBusMessage("x"))

    asyncio.run(scenario())


def test_aio_closing_a_receiver_releases_what_it_buffered_without_counting_a_delivery(emulator: Any) -> None:
    from sbdlq.addresses import Address, EntityPath

    q = emulator.queue()
    emulator.seed(q, *(f"m{i}" for i in range(5)))
    buffered: list[int] = []

    async def scenario() -> None:
        client = ServiceBusClient.from_connection_string(emulator.conn_str(), keep_alive=None)
        # Prefetch: the SDK asks for 5 and hands out 1; closing releases the 4 it kept.
        async with client, client.get_queue_receiver(q, prefetch_count=5) as receiver:
            (first,) = await receiver.receive_messages(max_message_count=1, max_wait_time=WAIT)
            queue = receiver._handler._received_messages  # the SDK's buffer (private)
            for _ in range(50):
                if queue.qsize() >= 4:
                    break
                await receiver.peek_messages(max_message_count=1)  # lets the SDK read its socket
            buffered.append(queue.qsize())
            await receiver.complete_message(first)

    asyncio.run(scenario())
    assert buffered == [4]
    left = emulator.engine.peek(Address(EntityPath(q)), 0, 10)
    # `released`: unlocked at once, and no delivery attempt counted (an abandon would count 1).
    assert [(m.body, m.delivery_count) for m in left] == [(f"m{i}".encode(), 0) for i in range(1, 5)]
    assert len(emulator.engine.receive(Address(EntityPath(q)), 10)) == 4
