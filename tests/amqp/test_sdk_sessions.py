"""Sessions through the unmodified azure-servicebus SDK, sync and asyncio (issue 13 item 1)."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient as AioClient
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)
from support.sdk import NOTHING_WAIT, WAIT, bodies, drain

from sbdlq.emulator.amqp.session_links import DEFAULT_WAIT_S


def test_a_second_receiver_for_a_held_session_cannot_lock_it(emulator: Any, client: Any) -> None:
    q = emulator.queue(requires_session=True)
    emulator.seed(q, "a1", session_id="A")
    with client.get_queue_receiver(q, session_id="A") as first:
        assert first.session.locked_until_utc > datetime.now(UTC)
        with pytest.raises(SessionCannotBeLockedError), client.get_queue_receiver(q, session_id="A") as second:
            second.receive_messages(max_wait_time=WAIT)
        (m,) = drain(first, 1)
        first.complete_message(m)
    # closing the first receiver lets the session go at once
    with client.get_queue_receiver(q, session_id="A") as third:
        assert third.session.session_id == "A"


def test_next_available_receivers_get_distinct_sessions_then_time_out(emulator: Any, client: Any) -> None:
    q = emulator.queue(requires_session=True)
    for sid in ("A", "B"):
        emulator.seed(q, f"{sid}1", f"{sid}2", session_id=sid)
    with (
        client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT) as r1,
        client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT) as r2,
    ):
        assert {r1.session.session_id, r2.session.session_id} == {"A", "B"}
        for r in (r1, r2):
            got = drain(r, 2)
            sid = r.session.session_id
            assert bodies(got) == [f"{sid}1", f"{sid}2"]  # only its own session, in order
            for m in got:
                r.complete_message(m)
        started = time.monotonic()
        with (
            pytest.raises(OperationTimeoutError) as caught,
            client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=NOTHING_WAIT) as r3,
        ):
            r3.receive_messages(max_wait_time=NOTHING_WAIT)
        # The broker answered at the end of the client's wait (the SDK sends what is left of
        # max_wait_time), not at its own default: that one would take DEFAULT_WAIT_S.
        said = re.search(r"allotted timeout of ([\d.]+) s: no session is available", str(caught.value))
        assert said and float(said.group(1)) <= NOTHING_WAIT, str(caught.value)
        assert time.monotonic() - started < DEFAULT_WAIT_S


def test_session_lock_renewal_and_expiry(emulator: Any, client: Any) -> None:
    q = emulator.queue(requires_session=True, lock_duration_s=30)
    emulator.seed(q, "x", session_id="S")
    with client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT) as holder:
        first = holder.session.locked_until_utc
        emulator.clock.advance(10)
        renewed = holder.session.renew_lock()
        assert renewed - first >= timedelta(seconds=9)
        emulator.clock.advance(31)  # the session lock lapses: the session is free again
        with client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT) as taker:
            assert taker.session.session_id == "S"
            assert bodies(drain(taker, 1)) == ["x"]
            with pytest.raises(SessionLockLostError):
                holder.session.renew_lock()


def test_session_state_and_listing(emulator: Any, client: Any) -> None:
    q = emulator.queue(requires_session=True)
    emulator.seed(q, "b", session_id="B")
    before = datetime.now(UTC) + timedelta(seconds=emulator.clock.t) - timedelta(seconds=1)
    with client.get_queue_receiver(q, session_id="A") as receiver:
        assert receiver.session.get_state() is None
        receiver.session.set_state("START")
        assert receiver.session.get_state() == b"START"
    assert sorted(client.list_queue_sessions(q)) == ["A", "B"]  # state or messages
    assert list(client.list_queue_sessions(q, state_updated_after=before)) == ["A"]
    far = datetime.now(UTC) + timedelta(seconds=emulator.clock.t + 3600)
    assert list(client.list_queue_sessions(q, state_updated_after=far)) == []
    with client.get_queue_receiver(q, session_id="A") as receiver:
        assert receiver.session.get_state() == b"START"  # kept after the lock ended
        receiver.session.set_state(None)
        assert receiver.session.get_state() is None


def test_peek_and_dead_letter_on_a_session_queue(emulator: Any, client: Any) -> None:
    q = emulator.queue(requires_session=True)
    emulator.seed(q, "p1", "p2", session_id="P")
    with client.get_queue_receiver(q, session_id="P") as receiver:
        assert bodies(receiver.peek_messages(max_message_count=5)) == ["p1", "p2"]
        m1, m2 = drain(receiver, 2)
        receiver.dead_letter_message(m1, reason="bad", error_description="why")
        receiver.complete_message(m2)
    with client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (d,) = drain(dlq, 1)
        assert (bodies([d]), d.session_id, d.dead_letter_reason) == (["p1"], "P", "bad")
        dlq.complete_message(d)


def test_aio_sessions(emulator: Any) -> None:
    q = emulator.queue(requires_session=True)
    emulator.seed(q, "a1", "a2", session_id="A")
    emulator.seed(q, "b1", session_id="B")

    async def scenario() -> None:
        async with AioClient.from_connection_string(emulator.conn_str(), keep_alive=None, retry_total=0) as client:
            async with (
                client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT) as r1,
                client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT) as r2,
            ):
                assert (r1.session.session_id, r2.session.session_id) == ("A", "B")
                with pytest.raises(SessionCannotBeLockedError):
                    async with client.get_queue_receiver(q, session_id="A") as r3:
                        await r3.receive_messages(max_wait_time=WAIT)
                await r1.session.set_state(b"s")
                assert await r1.session.get_state() == b"s"
                assert await r1.session.renew_lock() > datetime.now(UTC)
                got = await r1.receive_messages(max_message_count=5, max_wait_time=WAIT)
                assert bodies(got) == ["a1", "a2"]
                for m in got:
                    await r1.complete_message(m)
            names = [name async for name in client.list_queue_sessions(q)]
            assert sorted(names) == ["A", "B"]
            # B still has its message: a next-available receiver gets it, and then none is left
            async with client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT) as rb:
                assert rb.session.session_id == "B"
                with pytest.raises(OperationTimeoutError):
                    async with client.get_queue_receiver(
                        q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=NOTHING_WAIT
                    ) as r:
                        await r.receive_messages(max_wait_time=NOTHING_WAIT)

    asyncio.run(scenario())


def test_only_the_session_holder_may_renew_or_set_its_state(emulator: Any, client: Any) -> None:
    """A connection that never accepted the session must not renew its lock, nor read or set its state."""
    from proton import Message as ProtonMessage
    from support.tokens import bare_connection

    q = emulator.queue(requires_session=True)
    emulator.seed(q, "a", session_id="s1")
    with client.get_queue_receiver(q, session_id="s1", max_wait_time=5) as held:
        held.session.set_state("mine")
        other = bare_connection(emulator.port)
        try:
            node = f"{q}/$management"
            sender, replies = other.create_sender(node), other.create_receiver(node)
            for operation, body in (
                ("com.microsoft:set-session-state", {"session-id": "s1", "session-state": b"stolen"}),
                ("com.microsoft:renew-session-lock", {"session-id": "s1"}),
                ("com.microsoft:get-session-state", {"session-id": "s1"}),
            ):
                sender.send(ProtonMessage(body=body, reply_to=node, properties={"operation": operation}))
                reply = replies.receive(timeout=30)
                assert reply.properties["statusCode"] != 200, operation
        finally:
            other.close()
        assert held.session.get_state() in (b"mine", "mine")  # the holder still can


def test_settling_after_the_session_lock_expired_is_session_lock_lost(emulator: Any, client: Any) -> None:
    """Service Bus answers `com.microsoft:session-lock-lost` (the SDK's SessionLockLostError), not
    message-lock-lost, for a message taken through a session whose lock lapsed; it stays."""
    q = emulator.queue(requires_session=True, lock_duration_s=30)
    emulator.seed(q, "late", session_id="S")
    with client.get_queue_receiver(q, session_id="S", max_wait_time=WAIT) as receiver:
        (message,) = drain(receiver, 1)
        emulator.clock.advance(31)
        with pytest.raises(SessionLockLostError):
            receiver.complete_message(message)
    assert emulator.engine.counts(q).active == 1
