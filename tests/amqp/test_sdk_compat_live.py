"""The link shims of sbdlq/backends/servicebus/sdk_compat.py on a live SDK receiver (`emulator serve`)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.servicebus.aio import ServiceBusClient
from support.sdk import WAIT

from sbdlq.backends.servicebus import sdk_compat


async def _receive(receiver: Any, n: int) -> list[Any]:
    """n messages from a receiver, however many receives that takes."""
    got: list[Any] = []
    while len(got) < n:
        got += await receiver.receive_messages(max_message_count=10, max_wait_time=WAIT)
    return got


def test_link_shims_on_an_open_receiver(emulator: Any) -> None:
    q = emulator.queue()
    emulator.seed(q, "a", "b")

    async def scenario() -> None:
        async with ServiceBusClient.from_connection_string(emulator.conn_str(), keep_alive=None) as client:
            receiver = client.get_queue_receiver(q, prefetch_count=0)
            async with receiver:
                got = await _receive(receiver, 2)
                assert sdk_compat.handler_running(receiver) and not sdk_compat.half_torn(receiver)
                client_of = sdk_compat.amqp_client_of(receiver)
                assert client_of is not None
                # The receive left credit it did not use: the shim takes it back on pyamqp's link.
                link = client_of._link
                assert isinstance(link.current_link_credit, int)
                await sdk_compat.stop_credit(receiver)
                assert link.current_link_credit == 0
                assert sdk_compat.can_renew_many(receiver)
                untils = await sdk_compat.renew_many(receiver, got)
                assert all(isinstance(u, datetime) for u in untils)
                assert [m.locked_until_utc for m in got] == untils
                for message in got:
                    await receiver.complete_message(message)
            assert not sdk_compat.handler_running(receiver)

    asyncio.run(scenario())


def test_batch_delete_over_the_management_link(emulator: Any) -> None:
    from azure.servicebus.exceptions import ServiceBusError

    from sbdlq.addresses import Address, EntityPath

    q = emulator.queue()
    emulator.seed(q, "a", "b", "c", "d")
    # Locked messages stay: a batch delete takes only what a receiver could take now.
    assert len(emulator.engine.receive(Address(EntityPath(q)), 1)) == 1

    async def scenario() -> tuple[int, int, int]:
        client = ServiceBusClient.from_connection_string(emulator.conn_str(), keep_alive=None)
        async with client, client.get_queue_receiver(q, prefetch_count=0) as receiver:
            with pytest.raises(ServiceBusError):
                await sdk_compat.batch_delete(receiver, 501, None, 10)  # over Standard's 500
            # A cutoff before everything was enqueued deletes nothing (a 204 reply).
            none = await sdk_compat.batch_delete(receiver, 10, datetime(2000, 1, 1), 10)
            two = await sdk_compat.batch_delete(receiver, 2, None, 10)
            rest = await sdk_compat.batch_delete(receiver, 500, None, 10)
            return none, two, rest

    assert asyncio.run(scenario()) == (0, 2, 1)
    assert emulator.engine.counts(q).active == 1  # the locked one


def test_settle_run_settles_consecutive_deliveries_in_one_disposition(emulator: Any) -> None:
    from sbdlq.addresses import Address, EntityPath

    q = emulator.queue()
    emulator.seed(q, *"abcdefgh")

    async def scenario() -> tuple[bool, list[Any]]:
        async with ServiceBusClient.from_connection_string(emulator.conn_str(), keep_alive=None) as client:
            receiver = client.get_queue_receiver(q, prefetch_count=0)
            async with receiver:
                got = await _receive(receiver, 8)
                assert sdk_compat.settles_runs(receiver)
                ids = [sdk_compat.run_delivery_id(m) for m in got]
                assert ids == list(range(ids[0], ids[0] + 8))  # type: ignore[operator]
                await sdk_compat.settle_run(receiver, got[:3], "complete")
                await sdk_compat.settle_run(receiver, got[6:], "abandon")  # g and h: available again
                assert [m._settled for m in got] == [True] * 3 + [False] * 3 + [True] * 2
                assert sdk_compat.run_delivery_id(got[0]) is None  # settled: never in a run again
                # Another receiver's hands on e: the broker refuses its part of the next run.
                emulator.engine.abandon(Address(EntityPath(q)), [str(got[4].lock_token)])
                with pytest.raises(Exception) as refused:
                    await sdk_compat.settle_run(receiver, got[3:6], "complete")
                # Done with either way: settling one again would wait for an outcome the broker
                # never sends for a delivery it has forgotten.
                assert all(m._settled for m in got[3:6])
                return sdk_compat.error_condition(refused.value) is not None, got

    named, got = asyncio.run(scenario())
    assert named
    # d and f were completed all the same; e, whose lock was lost, is left, and g and h were abandoned.
    left = emulator.engine.peek(Address(EntityPath(q)), 0, 10)
    assert [m.message_id for m in left] == [got[i].message_id for i in (4, 6, 7)]
    assert [m.delivery_count for m in left[1:]] == [1, 1]  # an abandon counts the delivery
