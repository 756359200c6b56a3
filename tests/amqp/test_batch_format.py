"""A batch is known by its transfer's message-format (0x80013700), whatever its envelope carries.

The JavaScript SDK (@azure/service-bus) copies the first message's application properties,
message annotations and properties onto the batch envelope; the raw client here sends
exactly that shape, so no node is needed to prove the broker unbatches it.
"""

from __future__ import annotations

from typing import Any

import pytest
from proton import symbol
from raw_amqp import section, send_after_token

from sbdlq.addresses import parse_address

BATCH = 0x80013700
PROPERTIES, ANNOTATIONS, APP, DATA, VALUE = 0x73, 0x72, 0x74, 0x75, 0x77


def _inner(message_id: str, body: bytes, app: dict[str, Any]) -> bytes:
    """One message as the JS SDK encodes it inside a batch (properties, application properties, data)."""
    return section(PROPERTIES, [message_id]) + section(APP, app) + section(DATA, body)


def _js_envelope(inner: list[bytes], app: dict[str, Any]) -> bytes:
    """The envelope @azure/service-bus 7.9.5 wraps a batch in: the first message's properties,
    annotations and application properties, then one data section per encoded message."""
    head = section(ANNOTATIONS, {symbol("x-opt-partition-key"): "p"})
    return head + section(PROPERTIES, ["m0"]) + section(APP, app) + b"".join(section(DATA, m) for m in inner)


def test_js_batch_with_application_properties_is_three_messages(emulator: Any) -> None:
    q = emulator.queue()
    inner = [_inner(f"m{i}", f"body-{i}".encode(), {"n": i, "kind": "js"}) for i in range(3)]
    state = send_after_token(emulator.port, q, _js_envelope(inner, {"n": 0, "kind": "js"}), message_format=BATCH)
    assert int(state.descriptor) == 0x24, state  # accepted
    stored = emulator.engine.peek(parse_address(q), 0, 10)
    assert [m.body for m in stored] == [b"body-0", b"body-1", b"body-2"]
    assert [m.message_id for m in stored] == ["m0", "m1", "m2"]
    assert [m.application_properties for m in stored] == [{"n": i, "kind": "js"} for i in range(3)]


def test_a_plain_message_that_looks_like_a_batch_stays_one_message(emulator: Any) -> None:
    """Format 0: data sections that happen to hold encoded messages are the body, not a batch."""
    q = emulator.queue()
    inner = [_inner("a", b"x", {}), _inner("b", b"y", {})]
    state = send_after_token(emulator.port, q, b"".join(section(DATA, m) for m in inner), message_format=0)
    assert int(state.descriptor) == 0x24, state
    (stored,) = emulator.engine.peek(parse_address(q), 0, 10)
    assert stored.body == b"".join(inner)


@pytest.mark.parametrize("body", [section(DATA, b"not a message"), section(VALUE, "text")], ids=["data", "value"])
def test_a_batch_whose_sections_are_not_messages_is_refused(emulator: Any, body: bytes) -> None:
    q = emulator.queue()
    state = send_after_token(emulator.port, q, section(PROPERTIES, ["e"]) + body, message_format=BATCH)
    assert int(state.descriptor) == 0x25, state  # rejected
    condition = state.value[0].value[0]
    assert condition == symbol("amqp:decode-error")
    assert emulator.engine.peek(parse_address(q), 0, 10) == []
