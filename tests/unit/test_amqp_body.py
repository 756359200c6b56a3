"""backends/servicebus/amqp_body.py, the public path for amqp-value and amqp-sequence bodies,
against the SDK's own codec."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from sbdlq.backends.servicebus import amqp_body, sdk_compat

#: values the SDK's encoder takes, and which it writes byte for byte as amqp_body does
SAME_AS_THE_SDK: list[tuple[Any, list[Any] | None]] = [
    ("text", None),
    ("é" * 300, None),
    (7, None),
    (-300, None),
    (2.5, None),
    (True, None),
    (b"\x00\xff", None),
    ({"a": [1, 2, {"b": None}], "c": 2.0}, None),
    (list(range(300)), None),
    (uuid.UUID(int=7), None),
    (datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), None),
    (None, [[1, 2], ["a"]]),
]


@pytest.mark.parametrize(("value", "sequence"), SAME_AS_THE_SDK)
def test_encodes_as_the_sdk_does(value: Any, sequence: list[Any] | None) -> None:
    assert amqp_body.encode(value=value, sequence=sequence) == sdk_compat.encode_amqp_body(
        value=value, sequence=sequence
    )


@pytest.mark.parametrize(("value", "sequence"), [*SAME_AS_THE_SDK, (False, None), (None, None), ([], None)])
def test_reads_back_what_it_wrote(value: Any, sequence: list[Any] | None) -> None:
    assert amqp_body.decode(amqp_body.encode(value=value, sequence=sequence)) == (value, sequence)


def test_reads_types_the_sdk_writes_and_others_send() -> None:
    # ubyte, ushort, uint, ulong, symbol, char, float, an array of ints, a described value
    items = (
        b"\x50\x07"
        + b"\x60\x01\x00"
        + b"\x70\x00\x00\x00\x05"
        + b"\x80"
        + (9).to_bytes(8, "big")
        + b"\xa3\x03sym"
        + b"\x73\x00\x00\x00\x41"
        + b"\x72\x3f\xc0\x00\x00"
        + b"\xe0\x0a\x02\x71\x00\x00\x00\x01\x00\x00\x00\x02"
        + b"\x00\x53\x99\xa1\x01x"
    )
    body = b"\x00\x53\x77\xc0" + bytes((len(items) + 1, 9)) + items
    assert amqp_body.decode(body) == ([7, 256, 5, 9, "sym", "A", 1.5, [1, 2], "x"], None)


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\x53\x75\xa0\x01x",
        b"\x00\x53\x77\xa1\x05ab",
        b"\x00\x53\x77\x94" + b"\x00" * 16,
        b"\x01\x02",
        b"\x00\x53\x76\x71\x00\x00\x00\x01",
    ],
    ids=["data section", "short string", "decimal", "no descriptor", "sequence without a list"],
)
def test_refuses_what_is_not_a_value_or_sequence_section(body: bytes) -> None:
    with pytest.raises(ValueError):
        amqp_body.decode(body)


def test_a_long_the_sdk_refuses_is_written_as_an_amqp_long() -> None:
    with pytest.raises(sdk_compat.Unavailable):
        sdk_compat.encode_amqp_body(value=2**40)
    assert amqp_body.decode(amqp_body.encode(value=2**40)) == (2**40, None)
