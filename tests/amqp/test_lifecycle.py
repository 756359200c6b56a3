"""Locks over time, and stopping the listener with clients still connected."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.servicebus import ServiceBusClient
from support.sdk import WAIT

from sbdlq.addresses import parse_address
from sbdlq.emulator.amqp.limits import Limits
from sbdlq.errors import BadInput

#: Longer than any test waits: a timeout of this length never ends by itself within a test.
LONG_S = 600.0


def test_lock_expiry_redelivers_while_connected(emulator: Any, client: Any) -> None:
    q = emulator.queue(lock_duration_s=1)
    emulator.seed(q, "slow")
    with client.get_queue_receiver(q) as receiver:
        (first,) = receiver.receive_messages(max_wait_time=WAIT)
        assert first.delivery_count == 0
        emulator.clock.advance(1.1)  # let the lock lapse without settling
        (second,) = receiver.receive_messages(max_wait_time=WAIT)
        assert second.sequence_number == first.sequence_number
        assert second.delivery_count == 1
        receiver.complete_message(second)
    assert emulator.engine.counts(q).active == 0


def test_stop_with_a_client_holding_a_lock_loses_nothing(launch: Any) -> None:
    # The listener's own timeouts made long: a stop that waited for any of them (instead of
    # closing the client's connection) would outlast the join below by far.
    emu = launch("stop.db", limits=Limits(auth_timeout_s=LONG_S, http_timeout_s=LONG_S))
    q = emu.queue(lock_duration_s=1)
    emu.seed(q, "keep me")
    client = ServiceBusClient.from_connection_string(emu.conn_str(), keep_alive=None, retry_total=0)
    receiver = client.get_queue_receiver(q)
    try:
        (held,) = receiver.receive_messages(max_wait_time=WAIT)
        emu.stop.set()
        emu.thread.join(LONG_S / 10)
        assert not emu.thread.is_alive() and not emu.errors
        address = parse_address(q)
        assert [m.body for m in emu.engine.peek(address, 0, 5)] == [b"keep me"]
        assert emu.engine.receive(address, 5) == []  # still locked by the departed client
        emu.clock.advance(1.1)
        (again,) = emu.engine.receive(address, 5)
        assert again.sequence_number == held.sequence_number and again.delivery_count == 2
    finally:
        with contextlib.suppress(Exception):
            receiver.close()
        with contextlib.suppress(Exception):
            client.close()


def test_public_bind_requires_a_key(tmp_path: Path) -> None:
    from sbdlq.emulator.amqp.server import serve

    with pytest.raises(BadInput):
        serve(str(tmp_path / "x.db"), host="0.0.0.0", port=0, http_port=None, stop_event=threading.Event())
