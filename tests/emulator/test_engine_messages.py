"""Sequence numbers, the broker clock, and what a message carries through the store."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import APPLICATION_PROPERTIES, full_message, producer_fields

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from conftest import Clock, Helpers


def test_sequence_numbers_increase_per_entity(engine: Engine, h: Helpers) -> None:
    engine.create_queue("a")
    engine.create_queue("b")
    assert engine.send("a", h.msgs(3)) == [1, 2, 3]
    assert engine.send("b", h.msgs(2)) == [1, 2]
    assert engine.send("a", h.msgs(1)) == [4]
    assert [m.sequence_number for m in engine.peek(A("a"), 0, 10)] == [1, 2, 3, 4]


def test_sequence_numbers_are_not_reused_after_completion(engine: Engine, h: Helpers) -> None:
    engine.create_queue("q")
    engine.send("q", h.msgs(2))
    h.drain("q")
    assert engine.send("q", h.msgs(1)) == [3]


def test_sequence_numbers_survive_reopening_and_other_processes(db_path: Path, clock: Clock, h: Helpers) -> None:
    with Engine(db_path, clock=clock) as first:
        first.create_queue("q")
        assert first.send("q", h.msgs(2)) == [1, 2]
    code = (
        "import sys\n"
        "from sbdlq.emulator.engine import Engine\n"
        "from sbdlq.models import OutboundMessage\n"
        "with Engine(sys.argv[1]) as e:\n"
        "    print(e.send('q', [OutboundMessage(body=b'x') for _ in range(3)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(db_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[3, 4, 5]"
    with Engine(db_path, clock=clock) as again:
        assert again.send("q", h.msgs(1)) == [6]


def test_enqueued_time_is_the_broker_clock(engine: Engine, clock: Clock, h: Helpers) -> None:
    engine.create_queue("q")
    engine.send("q", h.msgs(1))
    clock.advance(90)
    engine.send("q", h.msgs(1, prefix="n"))
    first, second = engine.peek(A("q"), 0, 10)
    assert first.enqueued_time == clock.at(-90)
    assert second.enqueued_time == clock.at()
    assert first.enqueued_time.tzinfo is not None


def test_every_field_a_producer_sets_round_trips(engine: Engine) -> None:
    engine.create_queue("q")
    out = full_message(body=b"\x00\xffbinary", time_to_live_s=120)
    engine.send("q", [out])
    (m,) = engine.receive(A("q"), 1)
    assert producer_fields(m) == producer_fields(out)
    assert m.application_properties == APPLICATION_PROPERTIES
    assert m.delivery_count == 1


def test_message_id_is_assigned_when_missing(engine: Engine) -> None:
    engine.create_queue("q")
    engine.send("q", [OutboundMessage(body=b"x"), OutboundMessage(body=b"y")])
    a, b = engine.peek(A("q"), 0, 10)
    assert a.message_id and b.message_id and a.message_id != b.message_id


def test_application_property_types_round_trip(engine: Engine) -> None:
    engine.create_queue("q")
    when = datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=UTC)
    key = uuid.UUID("12345678-1234-5678-1234-567812345678")
    props = {
        "int": 42,
        "big": 2**62,
        "neg": -7,
        "float": 2.5,
        "whole_float": 3.0,
        "true": True,
        "false": False,
        "str": "héllo",
        "tagged_str": '{"$sbdlq": "bytes"}',
        "empty": "",
        "when": when,
        "when_cet": datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))),
        "bytes": b"\x00\x01\xfe",
        "uuid": key,
        "span": timedelta(seconds=90),
        "none": None,
    }
    engine.send("q", [OutboundMessage(body=b"x", application_properties=props)])
    (peeked,) = engine.peek(A("q"), 0, 1)
    (received,) = engine.receive(A("q"), 1)
    for m in (peeked, received):
        got = m.application_properties
        assert got == props
        for k, v in props.items():
            assert type(got[k]) is type(v), k


def test_naive_datetimes_are_read_as_utc(engine: Engine) -> None:
    engine.create_queue("q")
    engine.send("q", [OutboundMessage(body=b"x", application_properties={"at": datetime(2024, 1, 1, 8, 0)})])
    (m,) = engine.peek(A("q"), 0, 1)
    assert m.application_properties["at"] == datetime(2024, 1, 1, 8, 0, tzinfo=UTC)


def test_application_properties_are_copied_not_shared(engine: Engine) -> None:
    engine.create_queue("q")
    props = {"a": 1}
    out = OutboundMessage(body=b"x", application_properties=props)
    engine.send("q", [out, out])
    props["a"] = 2
    assert [m.application_properties for m in engine.peek(A("q"), 0, 10)] == [{"a": 1}, {"a": 1}]


def test_peek_pages_by_sequence_number(engine: Engine, h: Helpers) -> None:
    engine.create_queue("q")
    engine.send("q", h.msgs(10))
    page = engine.peek(A("q"), 4, 3)
    assert [m.sequence_number for m in page] == [4, 5, 6]
    assert engine.peek(A("q"), 11, 3) == []
    assert engine.peek(A("q"), 0, 0) == []


def test_peek_does_not_lock_or_count_a_delivery(engine: Engine, h: Helpers) -> None:
    engine.create_queue("q")
    engine.send("q", h.msgs(1))
    engine.peek(A("q"), 0, 1)
    (m,) = engine.peek(A("q"), 0, 1)
    assert m.lock_token is None and m.delivery_count == 0
    assert engine.receive(A("q"), 1)[0].delivery_count == 1


def test_empty_send_and_zero_receive(engine: Engine) -> None:
    engine.create_queue("q")
    assert engine.send("q", []) == []
    assert engine.receive(A("q"), 0) == []


def test_a_mixed_batch_keeps_its_order_and_fields(engine: Engine, clock: Clock) -> None:
    # Plain messages and ones with system properties, TTL or a schedule take different
    # insert statements; the batch must still read back in send order, each as sent.
    engine.create_queue("q", default_ttl_s=3600)
    batch = [
        OutboundMessage(body=b"0", message_id="plain"),
        OutboundMessage(body=b"1", message_id="subject", subject="s", session_id="sess"),
        OutboundMessage(body=b"2", message_id="props", application_properties={"k": "v"}),
        OutboundMessage(body=b"3", message_id="ttl", time_to_live_s=60),
        OutboundMessage(body=b"4", message_id="later", scheduled_enqueue_time=clock.at(30)),
        OutboundMessage(body=bytearray(b"5"), message_id="bytearray"),
    ]
    assert engine.send("q", batch) == [1, 2, 3, 4, 5, 6]
    got = engine.peek(A("q"), 0, 10)
    assert [m.message_id for m in got] == ["plain", "subject", "props", "ttl", "later", "bytearray"]
    assert [m.body for m in got] == [b"0", b"1", b"2", b"3", b"4", b"5"]
    assert (got[1].subject, got[1].session_id) == ("s", "sess")
    assert got[2].application_properties == {"k": "v"}
    assert [m.time_to_live_s for m in got] == [3600, 3600, 3600, 60, 3600, 3600]
    assert [m.state for m in got] == ["active"] * 4 + ["scheduled", "active"]
    assert got[4].expires_at == clock.at(30 + 3600)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_float_properties_round_trip_and_dead_letter(engine: Engine, value: float) -> None:
    """JSON has no NaN or infinity: they are stored tagged, and dead-lettering still works."""
    import math

    engine.create_queue("q")
    engine.send("q", [OutboundMessage(body=b"x", application_properties={"f": value, "n": 1})])
    (m,) = engine.receive(A("q"), 1)
    got = m.application_properties["f"]
    assert (math.isnan(got) if math.isnan(value) else got == value) and m.application_properties["n"] == 1
    assert engine.dead_letter(A("q"), [m.lock_token or ""], "Bad", "nan") == []
    (d,) = engine.peek(A("q/$DeadLetterQueue"), 0, 1)
    assert d.dead_letter_reason == "Bad"


# ---------------------------------------------------------------- maximum message size


def test_messages_up_to_256_kb_by_default_and_larger_ones_refused(engine: Engine) -> None:
    from sbdlq.emulator.engine.errors import MessageTooLarge
    from sbdlq.errors import InvalidOperation

    engine.create_queue("q")
    assert engine.max_message_bytes("q") == 262144
    engine.send("q", [OutboundMessage(body=b"x" * 262144, message_id="")])
    with pytest.raises(MessageTooLarge) as caught:
        engine.send("q", [OutboundMessage(body=b"x" * 262145, message_id="")])
    assert isinstance(caught.value, InvalidOperation)  # exit 1, as the SDK backend reports it
    assert caught.value.message == (
        "The received message (size:262145 bytes) exceeds the limit (262144 bytes) currently allowed on 'q'."
    )
    assert engine.counts("q").active == 1


def test_the_size_counts_properties_and_one_oversized_message_refuses_the_batch(engine: Engine) -> None:
    engine.create_queue("q", max_message_size_kb=1)
    fits = OutboundMessage(body=b"x" * 1000, message_id="")
    over = OutboundMessage(body=b"x" * 1000, message_id="", application_properties={"trace": "y" * 100})
    with pytest.raises(Exception, match=r"size:1105 bytes\) exceeds the limit \(1024 bytes\)"):
        engine.send("q", [fits, over])
    assert engine.counts("q").active == 0


def test_a_topic_limit_applies_to_its_subscriptions(engine: Engine) -> None:
    engine.create_topic("t", max_message_size_kb=102400)
    engine.create_subscription("t", "s")
    assert engine.max_message_bytes("t/Subscriptions/s") == 102400 * 1024
    engine.send("t", [OutboundMessage(body=b"x" * (1024 * 1024))])
    assert engine.counts("t/Subscriptions/s").active == 1


@pytest.mark.parametrize("value", [0, 102401, -5, True, 1.5, "256"])
def test_max_message_size_out_of_range_is_bad_input(engine: Engine, value: object) -> None:
    from sbdlq.errors import BadInput

    with pytest.raises(BadInput, match="MaxMessageSizeInKilobytes must be between 1 and 102400"):
        engine.create_queue("q", max_message_size_kb=value)


@pytest.mark.parametrize("field", ["message_id", "session_id"])
def test_an_id_past_128_characters_is_refused_and_nothing_is_sent(engine: Engine, field: str) -> None:
    from sbdlq.emulator.engine.errors import IdTooLong

    engine.create_queue("q")
    fine = OutboundMessage(body=b"ok", **{field: "x" * 128})
    assert len(engine.send("q", [fine])) == 1
    too_long = OutboundMessage(body=b"no", **{field: "y" * 129})
    with pytest.raises(IdTooLong, match="is 129 characters long: the maximum is 128"):
        engine.send("q", [OutboundMessage(body=b"first"), too_long])
    assert [m.body for m in engine.peek(A("q"), 0, 10)] == [b"ok"]  # the whole send refused
