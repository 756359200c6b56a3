"""The emulator admin library (what `sbdlq emulator ...` calls), on a real engine in tmp_path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sbdlq.addresses import Address, SubQueue, parse_address
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.emulator.admin import (
    LIST_COLUMNS,
    EmulatorAdmin,
    EntityRow,
    Settle,
    check_new_config,
    copies,
    entity_names,
    receive_and_settle,
)
from sbdlq.emulator.config_json import parse_config
from sbdlq.emulator.engine import Engine
from sbdlq.errors import BadInput, OperationFailed
from sbdlq.models import Counts, Message, OutboundMessage
from sbdlq.property_values import parse_properties, typed_value

if TYPE_CHECKING:
    from conftest import Clock


@pytest.fixture
def admin(engine: Engine) -> EmulatorAdmin:
    engine.create_queue("orders")
    engine.create_topic("events")
    engine.create_subscription("events", "audit")
    return EmulatorAdmin(engine)


@pytest.fixture
def backend(db_path: Path, clock: Clock, admin: EmulatorAdmin) -> Iterator[EmulatorBackend]:
    consumer = EmulatorBackend(str(db_path), clock=clock)
    yield consumer
    asyncio.run(consumer.close())


def settle(consumer: object, address: str, action: Settle, **kw: str | None) -> list[Message]:
    return asyncio.run(receive_and_settle(consumer, parse_address(address), 10, action, **kw))  # type: ignore[arg-type]


# ------------------------------------------------------------------ typed --property values


def test_property_values_are_typed() -> None:
    assert parse_properties(["n=42", "f=1.5", "e=1e3", "t=TRUE", "s=abc", 'q="42"', " k =v=w", "empty="]) == {
        "n": 42,
        "f": 1.5,
        "e": 1000.0,
        "t": True,
        "s": "abc",
        "q": "42",
        "k": "v=w",
        "empty": "",
    }
    assert typed_value("-7") == -7 and typed_value(".5") == 0.5 and typed_value("false") is False


@pytest.mark.parametrize("item", ["novalue", "=1", " =1"])
def test_a_property_without_key_names_the_option(item: str) -> None:
    with pytest.raises(BadInput, match=r"^--set-property .*: expected KEY=VALUE$"):
        parse_properties([item], option="--set-property")


# ------------------------------------------------------------------ send / list / reset


def test_copies_number_message_ids_only_for_several() -> None:
    one = OutboundMessage(message_id="m", application_properties={"a": 1})
    assert [m.message_id for m in copies(one, 1)] == ["m"]
    three = copies(one, 3)
    assert [m.message_id for m in three] == ["m-1", "m-2", "m-3"]
    three[0].application_properties["a"] = 2  # each copy owns its properties
    assert one.application_properties == {"a": 1} == three[1].application_properties
    assert [m.message_id for m in copies(OutboundMessage(), 2)] == [None, None]


def test_send_counts_what_the_broker_accepted(engine: Engine, admin: EmulatorAdmin) -> None:
    assert admin.send("orders", OutboundMessage(body=b"x"), count=3) == 3
    engine.create_queue("dedup", requires_duplicate_detection=True)
    assert admin.send("dedup", OutboundMessage(message_id="same"), count=1) == 1
    assert admin.send("dedup", OutboundMessage(message_id="same"), count=1) == 0


def test_list_rows_topics_have_no_counts(admin: EmulatorAdmin) -> None:
    admin.send("orders", OutboundMessage(body=b"x"), count=2)
    admin.send("events", OutboundMessage(body=b"y"))
    rows = admin.list_entities()
    assert rows == [
        EntityRow("events", "topic", None, 1),
        EntityRow("events/Subscriptions/audit", "subscription", Counts("events/Subscriptions/audit", active=1), None),
        EntityRow("orders", "queue", Counts("orders", active=2), None),
    ]
    assert list(rows[0].to_json()) == list(LIST_COLUMNS)


def test_reset_says_how_many_entities_went(admin: EmulatorAdmin) -> None:
    assert admin.entity_count() == 3
    assert admin.reset() == 3
    assert admin.list_entities() == [] and admin.entity_count() == 0


def test_apply_config_and_check_new_config(admin: EmulatorAdmin) -> None:
    cfg = parse_config(json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "new"}]}]}}))
    applied = admin.apply_config(cfg)
    assert [(a.kind, a.path, a.created) for a in applied] == [("queue", "new", True)]
    assert [(a.created) for a in admin.apply_config(cfg)] == [False]
    forwarding = {"Name": "fw", "Properties": {"ForwardTo": "elsewhere"}}
    bad = parse_config(json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [forwarding]}]}}))
    with pytest.raises(BadInput, match="'elsewhere' is not a queue or topic"):
        check_new_config(bad)


def test_entity_names_by_kind(db_path: Path, admin: EmulatorAdmin) -> None:
    assert entity_names(str(db_path), ("queue", "subscription")) == ["events/Subscriptions/audit", "orders"]
    assert entity_names(str(db_path), ("queue", "topic")) == ["events", "orders"]


# ------------------------------------------------------------------ receive and settle


def test_dead_letter_with_reason_through_the_backend(
    engine: Engine, admin: EmulatorAdmin, backend: EmulatorBackend
) -> None:
    admin.send("orders", OutboundMessage(message_id="m"), count=2)
    got = settle(backend, "orders", Settle.DEAD_LETTER, reason="Bad", description="why")
    assert [m.message_id for m in got] == ["m-1", "m-2"]
    dlq = engine.peek(Address(parse_address("orders").entity, SubQueue.DEAD_LETTER), 0, 10)
    assert [(m.dead_letter_reason, m.dead_letter_error_description) for m in dlq] == [("Bad", "why")] * 2


def test_complete_abandon_defer(engine: Engine, admin: EmulatorAdmin, backend: EmulatorBackend) -> None:
    admin.send("orders", OutboundMessage(body=b"x"))
    assert [m.delivery_count for m in settle(backend, "orders", Settle.ABANDON)] == [1]
    assert len(settle(backend, "orders", Settle.DEFER)) == 1
    assert settle(backend, "orders", Settle.COMPLETE) == []  # deferred: not receivable
    admin.send("orders", OutboundMessage(body=b"y"))
    assert len(settle(backend, "orders", Settle.COMPLETE)) == 1
    assert engine.counts("orders").active == 1  # only the deferred one is left


def test_lost_locks_fail_and_leave_the_messages(
    engine: Engine, clock: Clock, admin: EmulatorAdmin, backend: EmulatorBackend
) -> None:
    class Slow:
        """A consumer that takes longer than the lock before it settles."""

        async def receive(self, address: Address, max_count: int) -> list[Message]:
            got = await backend.receive(address, max_count)
            clock.advance(3600)
            return got

        def __getattr__(self, name: str) -> object:
            return getattr(backend, name)

    admin.send("orders", OutboundMessage(body=b"x"), count=2)
    with pytest.raises(OperationFailed, match=r"^2 lock\(s\) lost before settling; those messages stay in orders$"):
        settle(Slow(), "orders", Settle.COMPLETE)
    assert engine.counts("orders").active == 2
