"""The private-SDK shims of sbdlq/backends/servicebus/sdk_compat.py against the installed azure-servicebus.

An SDK upgrade that moves a private attribute the backend relies on fails here, by name, rather
than deep inside a resubmit. tests/amqp/test_sdk_compat_live.py runs the link shims on a live link.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import tomllib
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus import exceptions as sb
from azure.servicebus._pyamqp.aio._link_async import Link
from azure.servicebus._pyamqp.message import Message as AmqpMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from sbdlq.backends.servicebus import sdk_compat

CONN = "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _release(text: str) -> tuple[int, ...]:
    """The numeric release of a version (`7.15.0b1` → (7, 15, 0)), for comparisons."""
    match = re.match(r"\d+(?:\.\d+)*", text)
    assert match, text
    return tuple(int(p) for p in match.group().split("."))


def _satisfies(installed: str, clause: str) -> bool:
    op, bound = re.fullmatch(r"(>=|<|<=|>|==)\s*(\S+)", clause).groups()  # type: ignore[union-attr]
    have, want = _release(installed), _release(bound)
    width = max(len(have), len(want))
    have, want = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
    return {">=": have >= want, "<": have < want, "<=": have <= want, ">": have > want, "==": have == want}[op]


def test_pyproject_pins_the_tested_range() -> None:
    """The pin admits the tested releases and their patch releases of the highest minor, no more."""
    from sbdlq.backends.servicebus.shortcuts import TESTED_HIGHEST, TESTED_LOWEST

    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pin = next(d for d in deps if d.startswith("azure-servicebus"))
    lowest = ".".join(map(str, TESTED_LOWEST))
    above = f"{TESTED_HIGHEST[0]}.{TESTED_HIGHEST[1] + 1}"
    assert pin == f"azure-servicebus>={lowest},<{above}", (
        f"pyproject.toml pins {pin!r}; shortcuts.TESTED_LOWEST/TESTED_HIGHEST say {lowest} to "
        f"{'.'.join(map(str, TESTED_HIGHEST))}: widen both together"
    )


def test_only_the_tested_releases_take_the_shortcuts() -> None:
    from sbdlq.backends.servicebus.shortcuts import tested

    assert [tested(v) for v in ("7.14.3", "7.15.0", "7.15.2", "7.16.0", "7.15.0b1", "8.0.0")] == [
        False,
        True,
        False,
        False,
        False,
        False,
    ]


def test_installed_sdk_is_tested_or_runs_public_only() -> None:
    from sbdlq.backends.servicebus.shortcuts import Shortcuts, tested

    installed = version("azure-servicebus")
    policy = Shortcuts.resolve("auto")
    assert policy.enabled == tested(installed)
    if not policy.enabled:
        assert f"azure-servicebus {installed} is outside the tested" in policy.why


@pytest.fixture
def receiver() -> Any:
    """A real aio ServiceBusReceiver, never opened (nothing listens on port 1)."""

    async def make() -> tuple[Any, Any]:
        client = ServiceBusClient.from_connection_string(CONN)
        return client, client.get_queue_receiver("orders")

    client, made = asyncio.run(make())
    yield made
    asyncio.run(client.close())


def test_handler_state_shims_read_real_receiver_attributes(receiver: Any) -> None:
    assert isinstance(receiver, ServiceBusReceiver)
    # `_running` and `_handler` exist on a receiver that was never opened: not running, no client yet.
    assert receiver._running is False
    assert sdk_compat.handler_running(receiver) is False
    assert "_handler" in vars(receiver)
    assert sdk_compat.amqp_client_of(receiver) is receiver._handler
    assert sdk_compat.half_torn(receiver) is False
    receiver._running, receiver._handler = True, None  # what a torn-down-but-flagged handler looks like
    assert sdk_compat.half_torn(receiver) is True
    receiver._running = False


def test_batch_renewal_is_the_private_coroutine_the_shim_expects(receiver: Any) -> None:
    assert sdk_compat.can_renew_many(receiver)
    params = inspect.signature(receiver._renew_locks).parameters
    assert any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values()), "_renew_locks(*lock_tokens)"


def test_renew_many_feeds_the_expiry_the_sdk_checks_locks_by() -> None:
    message = ServiceBusReceivedMessage(AmqpMessage(data=[b"x"], message_annotations={}), receiver=None)
    until = datetime(2030, 1, 1, tzinfo=UTC)

    class Receiver:
        _running = True

        async def _renew_locks(self, *tokens: str) -> dict[bytes, list[int]]:
            return {b"expirations": [int((until - sdk_compat._EPOCH).total_seconds() * 1000)] * len(tokens)}

    assert asyncio.run(sdk_compat.renew_many(Receiver(), [message])) == [until]
    assert message.locked_until_utc == until  # the SDK reads `_expiry`
    message._expiry = datetime.now(UTC) - timedelta(seconds=1)
    assert message._lock_expired  # ...and refuses to settle by it


def test_no_retry_on_refusal_raises_from_the_sdk_retry_judge(receiver: Any) -> None:
    from azure.servicebus._pyamqp.error import AuthenticationException, ErrorCondition

    judge = receiver._handle_exception
    assert inspect.iscoroutinefunction(judge)
    refused = AuthenticationException(ErrorCondition.ClientError, description="CBS Token authentication failed.")
    # Unwrapped, the SDK's judge hands the refusal back to its retry loop: retry it.
    assert isinstance(asyncio.run(judge(refused)), sb.ServiceBusAuthenticationError)
    assert sdk_compat.no_retry_on_refusal(receiver) is receiver
    with pytest.raises(sb.ServiceBusAuthenticationError):
        asyncio.run(receiver._handle_exception(refused))
    # Anything else still goes back to the retry loop as the SDK decides.
    busy = sb.ServiceBusServerBusyError(message="busy")
    busy._retryable = True
    assert asyncio.run(receiver._handle_exception(busy)) is busy


def test_prompt_open_relies_on_the_sdk_open_loop() -> None:
    from azure.servicebus._pyamqp.aio._client_async import ReceiveClientAsync, SendClientAsync
    from azure.servicebus.aio import ServiceBusSender

    for handler in (ServiceBusReceiver, ServiceBusSender):
        opening = inspect.getsource(handler._open)
        # _open creates the pyamqp client through _create_handler, then polls its client_ready_async.
        assert "self._create_handler(" in opening and "self._handler.client_ready_async()" in opening
    for client in (ReceiveClientAsync, SendClientAsync):
        assert inspect.iscoroutinefunction(client.client_ready_async)


def test_prompt_open_reads_on_until_ready(receiver: Any) -> None:
    calls: list[int] = []

    class Client:
        async def client_ready_async(self) -> bool:
            calls.append(1)
            return len(calls) >= 3

    def create(auth: Any) -> None:
        receiver._handler = Client()

    receiver._create_handler = create
    assert sdk_compat.prompt_open(receiver) is receiver
    receiver._create_handler("auth")
    # One call of the handler's readiness check reads until the link is up (3 reads), not one frame.
    assert asyncio.run(receiver._handler.client_ready_async()) is True
    assert len(calls) == 3


def test_prompt_open_answers_not_yet_after_its_budget(receiver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Client:
        async def client_ready_async(self) -> bool:
            await asyncio.sleep(0.01)
            return False

    receiver._create_handler = lambda auth: setattr(receiver, "_handler", Client())
    monkeypatch.setattr(sdk_compat, "READY_POLL_S", 0.05)
    sdk_compat.prompt_open(receiver)._create_handler("auth")
    assert asyncio.run(receiver._handler.client_ready_async()) is False  # the SDK's own loop goes on


def test_stop_credit_uses_pyamqp_link_flow() -> None:
    assert inspect.iscoroutinefunction(Link.flow)
    assert "link_credit" in inspect.signature(Link.flow).parameters
    assert "current_link_credit" in inspect.getsource(Link.__init__)


def test_stop_credit_takes_the_credit_back() -> None:
    flows: list[int] = []

    class FakeLink:
        current_link_credit = 5

        async def flow(self, *, link_credit: int) -> None:
            flows.append(link_credit)
            self.current_link_credit = link_credit

    class Handler:
        _link = FakeLink()

    class Receiver:
        _handler = Handler()

    asyncio.run(sdk_compat.stop_credit(Receiver()))
    assert flows == [0]


def test_stop_credit_fails_closed_where_flow_counts_credit_another_way() -> None:
    """7.14's flow(link_credit=0) sends nothing and records a negative credit: undone, and Unavailable."""

    class FakeLink:
        current_link_credit = 5
        total_link_credit = 13

        async def flow(self, *, link_credit: int) -> None:
            self.current_link_credit = link_credit - self.total_link_credit

    class Handler:
        _link = FakeLink()

    class Receiver:
        _handler = Handler()

    with pytest.raises(sdk_compat.Unavailable):
        asyncio.run(sdk_compat.stop_credit(Receiver()))
    assert Handler._link.current_link_credit == 5


def as_text(value: Any) -> Any:
    """The SDK decodes AMQP strings as bytes."""
    return value.decode() if isinstance(value, bytes) else value


@pytest.mark.parametrize(
    ("value", "sequence"), [("text", None), ({"k": 1}, None), (None, [[1, 2], ["a"]])], ids=["str", "map", "seq"]
)
def test_body_sections_round_trip_through_the_sdk_codec(value: Any, sequence: list[Any] | None) -> None:
    encoded = sdk_compat.encode_amqp_body(value=value, sequence=sequence)
    decoded_value, decoded_sequence = sdk_compat.decode_amqp_body(encoded)
    if sequence is None:
        got = {as_text(k): v for k, v in decoded_value.items()} if isinstance(value, dict) else as_text(decoded_value)
        assert got == value and decoded_sequence is None
    else:
        assert [[as_text(x) for x in s] for s in decoded_sequence or []] == sequence


def test_error_condition_reads_the_sdk_exception() -> None:
    error = sb.ServiceBusError("refused", condition=b"amqp:not-allowed")
    assert hasattr(error, "_condition")
    assert sdk_compat.error_condition(error) == "amqp:not-allowed"
    wrapper = sb.ServiceBusError("wrapped", error=error)
    assert sdk_compat.error_condition(wrapper) == "amqp:not-allowed"
    assert sdk_compat.error_condition(ValueError("no condition")) is None


def test_stop_keep_alive_targets_the_task_pyamqp_close_awaits() -> None:
    from azure.servicebus._pyamqp.aio._client_async import AMQPClientAsync

    source = inspect.getsource(AMQPClientAsync.close_async)
    assert "self._keep_alive_thread" in source and "await self._keep_alive_thread" in source
    assert "self._keep_alive_thread = asyncio.ensure_future" in inspect.getsource(AMQPClientAsync.open_async)


def test_stop_keep_alive_cancels_and_forgets_the_task() -> None:
    async def scenario() -> tuple[bool, Any]:
        task = asyncio.ensure_future(asyncio.sleep(10))

        class Client:
            _keep_alive_thread = task

        class Handler:
            _handler = Client()

        handler = Handler()
        sdk_compat.stop_keep_alive(handler)
        sdk_compat.stop_keep_alive(handler)  # twice, or on a handler without one: nothing happens
        await asyncio.sleep(0)
        return task.cancelled(), handler._handler._keep_alive_thread

    assert asyncio.run(scenario()) == (True, None)


def test_run_refused_tells_a_refusal_from_no_answer() -> None:
    from azure.servicebus._pyamqp.error import ErrorCondition, MessageException, MessageSettlementUnconfirmed

    assert sdk_compat.run_refused(MessageException(condition=b"com.microsoft:message-lock-lost"))
    assert not sdk_compat.run_refused(MessageSettlementUnconfirmed(condition=ErrorCondition.ClientError))
    assert not sdk_compat.run_refused(TimeoutError("no outcome"))


def test_settle_run_relies_on_pyamqp_range_settlement() -> None:
    from azure.servicebus._pyamqp.aio._client_async import ReceiveClientAsync

    settle = ReceiveClientAsync.settle_messages_async
    assert inspect.iscoroutinefunction(settle)
    assert tuple(inspect.signature(settle).parameters)[1:4] == ("delivery_id", "delivery_tag", "outcome")
    assert "await_outcome" in inspect.getsource(settle)  # taken through **kwargs
    for name in ("_delivery_id", "_delivery_tag", "_settled", "_is_deferred_message", "_is_peeked_message"):
        assert name in inspect.getsource(ServiceBusReceivedMessage), name
