"""Batch lock renewal (`$management` renew-lock of several tokens) through the unmodified SDK
against `emulator serve`: after a lost lock, again, through a slow link, and of no tokens.

azure-servicebus 7.15 cannot decode an empty AMQP array (its decoder leaves the element
constructor behind): a renew-lock answered with empty `expirations` failed the SDK while it
read the frame ("index out of bounds on dimension 1") and shut the receiver down, with every
lock it held. serve never sends one (DESIGN §7).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("proton")

#: the queue's lock duration; the test moves the broker clock past it, never sleeps
LOCK_S = 5.0
COUNT = 6


async def _receive_all(receiver: Any, n: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < n:
        got += await receiver.receive_messages(n - len(got), max_wait_time=2)
    return got


def _client(conn: str) -> Any:
    from azure.servicebus.aio import ServiceBusClient

    return ServiceBusClient.from_connection_string(conn, retry_total=0, keep_alive=None)


def test_a_renewal_of_no_lock_tokens_is_refused_in_a_reply_the_sdk_reads(emulator: Any) -> None:
    """Refused as a request Service Bus cannot read either (the SDK writes an empty array with no
    element constructor: proton reads it as null), with a reply the SDK decodes. The SDK closes
    the receiver on this error as on any argument-error; its messages go back to the queue and
    the connection serves the next receiver."""
    from azure.servicebus.exceptions import ServiceBusError

    q = emulator.queue(lock_duration_s=LOCK_S)
    emulator.seed(q, "a", "b")

    async def scenario() -> tuple[str, list[str]]:
        async with _client(emulator.conn_str()) as sb:
            async with sb.get_queue_receiver(q) as receiver:
                await _receive_all(receiver, 2)
                with pytest.raises(ServiceBusError) as refused:
                    await receiver._renew_locks()
            async with sb.get_queue_receiver(q) as receiver:
                got = await _receive_all(receiver, 2)
                for message in got:
                    await receiver.complete_message(message)
            return str(refused.value), [str(m) for m in got]

    refused, bodies = asyncio.run(scenario())
    # Not "Handler failed: index out of bounds on dimension 1" (a reply it could not decode).
    assert "com.microsoft:argument-error" in refused and "lock-tokens" in refused, refused
    assert sorted(bodies) == ["a", "b"]
    assert emulator.engine.peek(_address(q), 1, 10) == []


def test_a_batch_renewal_again_after_a_lost_lock_through_a_slow_link(emulator: Any) -> None:
    """The report: a batch renewal right after one came back "lock lost", 300 ms round trips."""
    from azure.servicebus.exceptions import MessageLockLostError
    from support.proxy import DelayingProxy

    q = emulator.queue(lock_duration_s=LOCK_S)
    emulator.seed(q, *(f"m{i}" for i in range(COUNT)))

    async def scenario(conn: str) -> tuple[int, list[str]]:
        async with _client(conn) as sb, sb.get_queue_receiver(q) as receiver:
            got = await _receive_all(receiver, COUNT)
            kept, lapsing = got[:2], got[2:]
            emulator.clock.advance(LOCK_S * 0.6)
            await receiver._renew_locks(*(m.lock_token for m in kept))
            emulator.clock.advance(LOCK_S * 0.6)  # the others' locks lapse, the renewed two hold
            for _ in range(2):  # the whole request fails (as Service Bus does), and again
                with pytest.raises(MessageLockLostError):
                    await receiver._renew_locks(*(m.lock_token for m in got))
            renewed = await receiver._renew_locks(*(m.lock_token for m in kept))
            for message in kept:
                await receiver.complete_message(message)
            return len(renewed[b"expirations"]), sorted(str(m) for m in lapsing)

    with DelayingProxy(emulator.port, rtt_s=0.3) as proxy:
        conn = emulator.conn_str().replace(f":{emulator.port};", f":{proxy.port};")
        expirations, lapsed = asyncio.run(scenario(conn))
    assert expirations == 2
    # The lapsed four are back in the queue; the two renewed were completed.
    assert sorted(m.body.decode() for m in emulator.engine.peek(_address(q), 1, 10)) == lapsed


def _address(entity: str) -> Any:
    from sbdlq.addresses import parse_address

    return parse_address(entity)
