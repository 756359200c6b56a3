"""A future azure-servicebus, simulated: every private shortcut fails closed.

One private name at a time is hidden from sbdlq's code only (support.hiding; the SDK's own
code keeps it), or made to answer in another shape, and `resubmit` and `purge --max` run
against `emulator serve` through the CLI. Each run must move every message exactly once,
leave the DLQ's exact remainder, report exact counts and exit 0, and name the shortcut it
gave up in `sdk_fallbacks`.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

from support.cli import Cli
from support.hiding import hidden, swapped
from support.seeding import Seeder

from sbdlq.addresses import Address, EntityPath, SubQueue

N = 60
PURGE_MAX = 25


def _receiver_class() -> Any:
    from azure.servicebus.aio import ServiceBusReceiver

    return ServiceBusReceiver


def _message_class() -> Any:
    from azure.servicebus._common.message import ServiceBusReceivedMessage

    return ServiceBusReceivedMessage


def _client_class() -> Any:
    from azure.servicebus._pyamqp.aio import ReceiveClientAsync

    return ReceiveClientAsync


def _link_class() -> Any:
    from azure.servicebus._pyamqp.aio._link_async import Link

    return Link


def _module(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def _renamed_expirations(renew: Any) -> Any:
    async def renew_locks(*tokens: Any, **kwargs: Any) -> Any:
        reply = await renew(*tokens, **kwargs)
        return {b"expiration-times": reply[b"expirations"]}

    return renew_locks


def _count_renamed(request: Any) -> Any:
    """`_mgmt_request_response` whose reply body names the count another way (after the broker acted)."""

    class Renamed:
        def __init__(self, message: Any) -> None:
            self.application_properties = message.application_properties
            value = message.value or {}
            renamed = {b"message-count": b"deleted-count", "message-count": "deleted-count"}
            self.value = {renamed.get(k, k): v for k, v in value.items()}

    async def mgmt(operation: Any, body: Any, callback: Callable[..., Any], **kwargs: Any) -> Any:
        def reply(status: Any, message: Any, description: Any, **kw: Any) -> Any:
            return callback(status, Renamed(message), description, **kw)

        return await request(operation, body, reply, **kwargs)

    return mgmt


def _count_in_a_list(request: Any) -> Any:
    """`_mgmt_request_response` whose reply body is a list instead of a map (after the broker acted)."""

    class Listed:
        def __init__(self, message: Any) -> None:
            self.application_properties = message.application_properties
            self.value = list((message.value or {}).items())

    async def mgmt(operation: Any, body: Any, callback: Callable[..., Any], **kwargs: Any) -> Any:
        def reply(status: Any, message: Any, description: Any, **kw: Any) -> Any:
            return callback(status, Listed(message), description, **kw)

        return await request(operation, body, reply, **kwargs)

    return mgmt


def _keyword_renamed(request: Any) -> Any:
    """`_mgmt_request_response` that calls the reply callback with a renamed keyword argument."""

    async def mgmt(operation: Any, body: Any, callback: Callable[..., Any], **kwargs: Any) -> Any:
        def reply(status: Any, message: Any, description: Any, **kw: Any) -> Any:
            return callback(status, message, description, transport=kw.get("amqp_transport"))

        return await request(operation, body, reply, **kwargs)

    return mgmt


def _fails_after_settling(settle: Any) -> Any:
    """`settle_messages_async` that settles, then fails as a changed signature would."""

    async def settle_then_fail(*args: Any, **kwargs: Any) -> Any:
        await settle(*args, **kwargs)
        raise TypeError("settle_messages_async() got an unexpected keyword argument 'outcome_timeout'")

    return settle_then_fail


def _decoder_called_another_way(decode: Any) -> Any:
    def decode_payload(buffer: Any, *, frame_type: Any) -> Any:
        return decode(buffer)

    return decode_payload


def _decoder_answers_a_tuple(decode: Any) -> Any:
    def decode_payload(buffer: Any) -> Any:
        decoded = decode(buffer)
        return (decoded.value, decoded.sequence)

    return decode_payload


#: (id, what sbdlq no longer sees as today, the shortcut it must give up: None where today's
#: SDK has a public answer the shim already takes, so nothing is given up)
SIMULATIONS: list[tuple[str, Callable[[], Any], str | None]] = [
    ("renew_locks hidden", lambda: hidden(_receiver_class(), "_renew_locks"), None),
    ("mgmt_request_response hidden", lambda: hidden(_receiver_class(), "_mgmt_request_response"), "batch_delete"),
    ("amqp_transport hidden", lambda: hidden(_receiver_class(), "_amqp_transport"), "batch_delete"),
    ("await_settlement_outcome hidden", lambda: hidden(_receiver_class(), "_await_settlement_outcome"), "settle_runs"),
    ("config hidden", lambda: hidden(_receiver_class(), "_config"), "settle_runs"),
    ("received_delivery_tags hidden", lambda: hidden(_link_class(), "_received_delivery_tags"), "settle_runs"),
    ("running hidden", lambda: hidden(_receiver_class(), "_running"), None),
    ("handler hidden", lambda: hidden(_receiver_class(), "_handler"), "settle_runs"),
    ("create_handler hidden", lambda: hidden(_receiver_class(), "_create_handler"), None),
    ("handle_exception hidden", lambda: hidden(_receiver_class(), "_handle_exception"), None),
    ("delivery_id hidden", lambda: hidden(_message_class(), "_delivery_id"), "settle_runs"),
    ("settled hidden", lambda: hidden(_message_class(), "_settled"), "settle_runs"),
    ("lock_expired hidden", lambda: hidden(_message_class(), "_lock_expired"), "settle_runs"),
    ("settle_messages_async hidden", lambda: hidden(_client_class(), "settle_messages_async"), "settle_runs"),
    ("link hidden", lambda: hidden(_client_class(), "_link"), "settle_runs"),
    ("keep_alive_thread hidden", lambda: hidden(_client_class(), "_keep_alive_thread"), None),
    (
        "MessageSettlementUnconfirmed moved",
        lambda: hidden(_module("azure.servicebus._pyamqp.error"), "MessageSettlementUnconfirmed"),
        "settle_runs",
    ),
    ("renew reply reshaped", lambda: swapped(_receiver_class(), "_renew_locks", _renamed_expirations), None),
    (
        "batch delete reply reshaped",
        lambda: swapped(_receiver_class(), "_mgmt_request_response", _count_renamed),
        "batch_delete",
    ),
    (
        "batch delete reply a list",
        lambda: swapped(_receiver_class(), "_mgmt_request_response", _count_in_a_list),
        "batch_delete",
    ),
    (
        "batch delete callback keyword renamed",
        lambda: swapped(_receiver_class(), "_mgmt_request_response", _keyword_renamed),
        None,
    ),
    (
        "settlement run fails after settling",
        lambda: swapped(_client_class(), "settle_messages_async", _fails_after_settling),
        "settle_runs",
    ),
]
IDS = [s[0] for s in SIMULATIONS]

#: the body codec's privates: exercised by messages whose bodies are amqp-value and amqp-sequence
CODEC_SIMULATIONS: list[tuple[str, Callable[[], Any]]] = [
    ("encode_payload moved", lambda: hidden(_module("azure.servicebus._pyamqp._encode"), "encode_payload")),
    ("decode_payload moved", lambda: hidden(_module("azure.servicebus._pyamqp._decode"), "decode_payload")),
    (
        "decode_payload called another way",
        lambda: swapped(_module("azure.servicebus._pyamqp._decode"), "decode_payload", _decoder_called_another_way),
    ),
    (
        "decode_payload answers another shape",
        lambda: swapped(_module("azure.servicebus._pyamqp._decode"), "decode_payload", _decoder_answers_a_tuple),
    ),
]


def _dlq_ids(seed: Seeder, queue: str) -> list[str]:
    dlq = Address(EntityPath(queue), SubQueue.DEAD_LETTER)
    return sorted(str(m.message_id) for m in seed.engine.peek(dlq, 0, 10_000))


def _run(cli: Cli, emulator: Any, *args: str) -> Any:
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(emulator.http_port), "SBDLQ_SDK_SHORTCUTS": "on"}
    return cli.bare("--connection-string", emulator.conn_str(), "--timeout", "10s", *args, "-o", "json", env=env)


@pytest.fixture
def sbcli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "unused.db", tmp_path / "home")


@pytest.mark.parametrize(("name", "simulate", "given_up"), SIMULATIONS, ids=IDS)
def test_resubmit_moves_each_message_once_under_a_changed_sdk(
    emulator: Any, sbcli: Cli, name: str, simulate: Callable[[], Any], given_up: str | None
) -> None:
    seed = Seeder(emulator.engine)
    queue = emulator.queue()
    wanted = sorted(f"{queue}-{i}" for i in range(N))
    seed.dead_letter(queue, seed.msgs(N, prefix=f"{queue}-"))
    with simulate():
        result = _run(sbcli, emulator, "resubmit", queue, "--batch-size", "20")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert (doc["selected"], doc["resubmitted"], doc["failed"]) == (N, N, 0)
    copies = Counter(m.message_id for m in seed.engine.peek(Address(EntityPath(queue)), 0, 10_000))
    assert sorted(copies) == wanted and set(copies.values()) == {1}
    assert _dlq_ids(seed, queue) == []
    if given_up is not None and given_up != "batch_delete":
        assert given_up in doc["sdk_fallbacks"]


@pytest.mark.parametrize(("name", "simulate", "given_up"), SIMULATIONS, ids=IDS)
def test_purge_max_deletes_exactly_max_under_a_changed_sdk(
    emulator: Any, sbcli: Cli, name: str, simulate: Callable[[], Any], given_up: str | None
) -> None:
    seed = Seeder(emulator.engine)
    queue = emulator.queue()
    seed.dead_letter(queue, seed.msgs(N, prefix=f"{queue}-"))
    with simulate():
        result = _run(sbcli, emulator, "purge", queue, "--max", str(PURGE_MAX), "--yes")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert (doc["selected"], doc["purged"]) == (PURGE_MAX, PURGE_MAX)
    assert len(_dlq_ids(seed, queue)) == N - PURGE_MAX
    if given_up == "batch_delete":
        assert doc["sdk_fallbacks"] == ["batch_delete"]


def test_shortcuts_off_takes_the_public_path_and_gives_nothing_up(emulator: Any, sbcli: Cli) -> None:
    seed = Seeder(emulator.engine)
    queue = emulator.queue()
    seed.dead_letter(queue, seed.msgs(N, prefix=f"{queue}-"))
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(emulator.http_port), "SBDLQ_SDK_SHORTCUTS": "off"}
    # Every private hidden at once: public-only mode must not need any of them.
    with contextlib.ExitStack() as stack:
        for sim_name, simulate, _given_up in SIMULATIONS:
            if sim_name.endswith(("hidden", "moved")):
                stack.enter_context(simulate())
        result = sbcli.bare(
            "--connection-string",
            emulator.conn_str(),
            "-v",
            "purge",
            queue,
            "--max",
            "10",
            "--yes",
            "-o",
            "json",
            env=env,
        )
    assert result.exit_code == 0, result.stderr
    assert result.json()["purged"] == 10 and result.json()["sdk_fallbacks"] == []
    assert len(_dlq_ids(seed, queue)) == N - 10
    assert "shortcuts off (SBDLQ_SDK_SHORTCUTS)" in result.stderr


def _value_and_sequence_messages(queue: str) -> list[Any]:
    from sbdlq.backends.servicebus import amqp_body
    from sbdlq.models import OutboundMessage

    # (Not None: the SDK sends no body at all for a value it reads as false.)
    values: list[Any] = [{"order": 7, "tags": ["a", "b"]}, 12, "text", 2.5, True, [1, [2, 3]]]
    out = [
        OutboundMessage(body=amqp_body.encode(value=v), body_type="value", message_id=f"{queue}-v{i}")
        for i, v in enumerate(values)
    ]
    out.append(
        OutboundMessage(body=amqp_body.encode(sequence=[[1, 2], ["x"]]), body_type="sequence", message_id=f"{queue}-s")
    )
    return out


@pytest.mark.parametrize(("name", "simulate"), CODEC_SIMULATIONS, ids=[c[0] for c in CODEC_SIMULATIONS])
def test_value_and_sequence_bodies_move_intact_under_a_changed_sdk(
    emulator: Any, sbcli: Cli, name: str, simulate: Callable[[], Any]
) -> None:
    seed = Seeder(emulator.engine)
    queue = emulator.queue()
    originals = _value_and_sequence_messages(queue)
    seed.dead_letter(queue, originals)
    with simulate():
        result = _run(sbcli, emulator, "resubmit", queue)
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert (doc["selected"], doc["resubmitted"], doc["failed"], doc["sdk_fallbacks"]) == (7, 7, 0, ["body_codec"])
    copies = {m.message_id: m for m in seed.engine.peek(Address(EntityPath(queue)), 0, 100)}
    assert sorted(copies) == sorted(m.message_id for m in originals)
    from sbdlq.backends.servicebus import amqp_body

    for original in originals:
        copy = copies[original.message_id]
        assert copy.body_type == original.body_type
        assert amqp_body.decode(copy.body) == amqp_body.decode(original.body)
    assert _dlq_ids(seed, queue) == []


def test_a_shortcut_given_up_is_one_line_with_verbose(emulator: Any, sbcli: Cli) -> None:
    seed = Seeder(emulator.engine)
    queue = emulator.queue()
    seed.dead_letter(queue, seed.msgs(N, prefix=f"{queue}-"))
    with swapped(_receiver_class(), "_mgmt_request_response", _count_renamed):
        result = _run(sbcli, emulator, "-v", "purge", queue, "--max", str(PURGE_MAX), "--yes")
    assert result.exit_code == 0, result.stderr
    given_up = [line for line in result.stderr.splitlines() if "SDK shortcut" in line]
    assert len(given_up) == 1 and "batch_delete given up" in given_up[0], result.stderr
    assert "shortcuts on (SBDLQ_SDK_SHORTCUTS" in result.stderr
    assert len(_dlq_ids(seed, queue)) == N - PURGE_MAX


def _renew_reply_a_list(renew: Any) -> Any:
    async def renew_locks(*tokens: Any, **kwargs: Any) -> Any:
        return list((await renew(*tokens, **kwargs))[b"expirations"])

    return renew_locks


def _renew_reply_short(renew: Any) -> Any:
    async def renew_locks(*tokens: Any, **kwargs: Any) -> Any:
        reply = await renew(*tokens, **kwargs)
        return {b"expirations": list(reply[b"expirations"])[:-1]}

    return renew_locks


def _renew_reply_unreadable(renew: Any) -> Any:
    async def renew_locks(*tokens: Any, **kwargs: Any) -> Any:
        await renew(*tokens, **kwargs)  # renewed at the broker; then the SDK cannot read the reply
        raise TypeError("list indices must be integers or slices, not bytes")

    return renew_locks


def _sdk_reads_renew_reply_another_way() -> Any:
    """The SDK's own reply handler for the batch renewal failing as it reads the reply (after the
    broker renewed): in 7.15 `_do_retryable_operation` turns that into ServiceBusError("Handler
    failed: ...") and shuts the receiver down, so sbdlq sees no shape error of its own."""
    from unittest import mock

    from azure.servicebus._common import mgmt_handlers

    def unreadable(status_code: Any, message: Any, description: Any, amqp_transport: Any) -> Any:
        raise TypeError("list indices must be integers or slices, not bytes")

    return mock.patch.object(mgmt_handlers, "message_lock_renew_op", unreadable)


#: what lock renewal relies on, gone or answering in another shape: the renewal is made again,
#: one message at a time, the public way, before anything depends on it (issue 34 #10)
RENEW_SIMULATIONS: list[tuple[str, Callable[[], Any]]] = [
    ("renew_locks hidden", lambda: hidden(_receiver_class(), "_renew_locks")),
    ("renew reply reshaped", lambda: swapped(_receiver_class(), "_renew_locks", _renamed_expirations)),
    ("renew reply a list", lambda: swapped(_receiver_class(), "_renew_locks", _renew_reply_a_list)),
    ("renew reply too short", lambda: swapped(_receiver_class(), "_renew_locks", _renew_reply_short)),
    ("renew reply unreadable", lambda: swapped(_receiver_class(), "_renew_locks", _renew_reply_unreadable)),
    ("expiry hidden", lambda: hidden(_message_class(), "_expiry")),
]


@pytest.mark.parametrize(("name", "simulate"), RENEW_SIMULATIONS, ids=[r[0] for r in RENEW_SIMULATIONS])
def test_locks_are_renewed_the_public_way_under_a_changed_sdk(
    emulator: Any, name: str, simulate: Callable[[], Any]
) -> None:
    import asyncio

    from sbdlq.backends.servicebus import ServiceBusBackend

    seed = Seeder(emulator.engine)
    queue = emulator.queue(lock_duration_s=30)
    seed.dead_letter(queue, seed.msgs(3, prefix=f"{queue}-"))
    dlq = Address(EntityPath(queue), SubQueue.DEAD_LETTER)

    async def scenario() -> tuple[list[Any], list[Any], list[Any], list[str]]:
        backend = ServiceBusBackend(
            connection_string=emulator.conn_str(), admin_port=emulator.http_port, sdk_shortcuts="on"
        )
        try:
            got = await backend.receive(dlq, 3, max_wait_s=2)
            before = [m.locked_until for m in got]
            emulator.clock.advance(20)  # the broker's clock: the new expiries come after the old ones
            with simulate():
                lost = await backend.renew_locks(dlq, got)
            after = [m.locked_until for m in got]
            assert await backend.complete(dlq, got) == []
            return lost, before, after, backend.sdk_fallbacks
        finally:
            await backend.close()

    lost, before, after, fallbacks = asyncio.run(scenario())
    assert lost == [] and len(after) == 3
    assert all(b is not None and a is not None and a > b for a, b in zip(after, before, strict=True))
    assert fallbacks == ["renew_many"]
    assert _dlq_ids(seed, queue) == []


def test_a_batch_renewal_failing_inside_the_sdk_loses_that_receivers_locks_and_is_given_up(emulator: Any) -> None:
    # 7.15 wraps an error of its own reply handler ("Handler failed") and shuts the receiver down:
    # its locks are gone, said as lost (not a failed run); the next renewal goes the public way
    # and shuts no other receiver down.
    import asyncio

    from sbdlq.backends.servicebus import ServiceBusBackend

    seed = Seeder(emulator.engine)
    queue = emulator.queue(lock_duration_s=30)
    seed.dead_letter(queue, seed.msgs(6, prefix=f"{queue}-"))
    dlq = Address(EntityPath(queue), SubQueue.DEAD_LETTER)

    async def scenario() -> tuple[list[Any], list[Any], list[Any], list[str]]:
        backend = ServiceBusBackend(
            connection_string=emulator.conn_str(), admin_port=emulator.http_port, sdk_shortcuts="on"
        )
        try:
            first = await backend.receive(dlq, 3, max_wait_s=2)
            with _sdk_reads_renew_reply_another_way():
                lost = await backend.renew_locks(dlq, first)
            second = await backend.receive(dlq, 3, max_wait_s=2)
            lost_again = await backend.renew_locks(dlq, second)
            assert await backend.complete(dlq, second) == []
            return lost, first, lost_again, backend.sdk_fallbacks
        finally:
            await backend.close()

    lost, first, lost_again, fallbacks = asyncio.run(scenario())
    assert len(lost) == len(first) == 3  # nothing is sent for them: their lock went with the receiver
    assert lost_again == []
    assert fallbacks == ["renew_many"]
    assert len(_dlq_ids(seed, queue)) == 3  # the first three: never completed, still in the DLQ
