"""`Quotas`: the Microsoft emulator's quotas, each refused at its boundary; generous changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.emulator.engine.errors import (
    EntityCountQuota,
    EntitySizeQuota,
    MaxMessageSizeOutOfRange,
    MessageTooLarge,
    SubscriptionCountQuota,
    TimeToLiveOverQuota,
)
from sbdlq.emulator.engine.vocabulary import GENEROUS, MICROSOFT, Quotas
from sbdlq.errors import BadInput, QuotaExceeded
from sbdlq.models import OutboundMessage


def _engine(store: Path, quotas: Quotas) -> Engine:
    return Engine(store, quotas=quotas)


def test_the_microsoft_quotas_are_the_documented_ones() -> None:
    assert (MICROSOFT.queues_and_topics, MICROSOFT.subscriptions_per_topic, MICROSOFT.connections) == (50, 50, 10)
    assert (MICROSOFT.message_kb, MICROSOFT.entity_bytes, MICROSOFT.ttl_s) == (256, 100 * 1024 * 1024, 3600)


def test_fifty_queues_and_topics_then_refused(store: Path) -> None:
    with _engine(store, MICROSOFT) as engine:
        for i in range(49):
            engine.create_queue(f"q{i}")
        engine.create_topic("t")  # the 50th
        engine.create_queue("q0", exist_ok=True, max_delivery_count=3)  # an update is no new entity
        with pytest.raises(EntityCountQuota) as refused:
            engine.create_queue("q50")
        assert isinstance(refused.value, QuotaExceeded)
        assert str(refused.value) == (
            "The maximum number of queues and topics in the namespace (50) has been reached or exceeded: "
            "'q50' was not created. QuotaType: EntityCount"
        )
        with pytest.raises(EntityCountQuota):
            engine.create_topic("t50")
        engine.delete_entity("q0")
        engine.create_topic("t50")  # room again
        assert len(engine.list_entities()) == 50


def test_fifty_subscriptions_a_topic_then_refused(store: Path) -> None:
    with _engine(store, MICROSOFT) as engine:
        engine.create_topic("t")
        engine.create_topic("other")
        for i in range(50):
            engine.create_subscription("t", f"s{i}")
        with pytest.raises(SubscriptionCountQuota, match=r"subscriptions on topic 't' \(50\)"):
            engine.create_subscription("t", "s50")
        engine.create_subscription("other", "s0")  # per topic


def test_a_default_ttl_over_an_hour_is_refused_and_none_given_is_an_hour(store: Path) -> None:
    with _engine(store, MICROSOFT) as engine:
        assert engine.create_queue("q", default_ttl_s=3600).default_ttl_s == 3600
        with pytest.raises(TimeToLiveOverQuota) as refused:
            engine.create_queue("q2", default_ttl_s=3601)
        assert isinstance(refused.value, BadInput)
        assert str(refused.value) == (
            "The value supplied for DefaultMessageTimeToLive (PT1H1S) exceeds the maximum of PT1H allowed here."
        )
        assert engine.create_queue("plain").default_ttl_s == 3600  # the Microsoft emulator's default
        engine.create_topic("t")
        assert engine.create_subscription("t", "s").default_ttl_s == 3600


def test_a_message_ttl_over_an_hour_is_capped_not_refused(store: Path) -> None:
    with Engine(store) as generous:
        generous.create_queue("old")  # made before the quotas: TTL "never"
    with _engine(store, MICROSOFT) as engine:
        engine.send("old", [OutboundMessage(body=b"long", time_to_live_s=7200), OutboundMessage(body=b"none")])
        engine.send("old", [OutboundMessage(body=b"short", time_to_live_s=60)])
        ttls = {m.body: m.time_to_live_s for m in engine.peek(parse_address("old"), 0, 10)}
    assert ttls == {b"long": 3600, b"none": 3600, b"short": 60}


def test_messages_up_to_256_kb(store: Path) -> None:
    with Engine(store) as generous:
        generous.create_queue("big", max_message_size_kb=1024)  # made before the quotas
    with _engine(store, MICROSOFT) as engine:
        engine.create_queue("q", max_message_size_kb=256)
        with pytest.raises(MaxMessageSizeOutOfRange, match="between 1 and 256, got 257"):
            engine.create_queue("q2", max_message_size_kb=257)
        assert engine.max_message_bytes("big") == 256 * 1024
        engine.send("big", [OutboundMessage(body=b"x" * (256 * 1024))])
        with pytest.raises(MessageTooLarge):
            engine.send("big", [OutboundMessage(body=b"x" * (256 * 1024 + 1))])


def test_an_entity_holds_at_most_its_size_quota(store: Path) -> None:
    quotas = Quotas(name="small", entity_bytes=1000)
    with _engine(store, quotas) as engine:
        engine.create_queue("q")
        engine.send("q", [OutboundMessage(body=b"x" * 600)])
        engine.send("q", [OutboundMessage(body=b"x" * 400)])  # exactly 1000
        with pytest.raises(EntitySizeQuota) as refused:
            engine.send("q", [OutboundMessage(body=b"x")])
        assert str(refused.value) == (
            "The maximum entity size has been reached or exceeded for Queue: 'q'. "
            "Size of entity in bytes:1000, Max entity size in bytes: 1000. QuotaType: EntitySize"
        )
        # Dead-lettered messages count: the entity stays full until they leave.
        m = engine.receive(parse_address("q"), 1)[0]
        assert m.lock_token is not None
        engine.dead_letter(parse_address("q"), [m.lock_token], reason="r")
        with pytest.raises(EntitySizeQuota):
            engine.send("q", [OutboundMessage(body=b"x")])
        engine.create_queue("other")  # per entity: the store is past the quota, this queue is not
        engine.send("other", [OutboundMessage(body=b"x" * 1000)])
        engine.create_topic("t")
        engine.create_subscription("t", "a")
        engine.create_subscription("t", "b")
        engine.send("t", [OutboundMessage(body=b"x" * 500)])  # a copy in each subscription
        with pytest.raises(EntitySizeQuota, match=r"for Topic: 't'\. Size of entity in bytes:1000"):
            engine.send("t", [OutboundMessage(body=b"x")])


def test_generous_changes_nothing(store: Path) -> None:
    with _engine(store, GENEROUS) as engine:
        for i in range(51):
            engine.create_queue(f"q{i}")
        engine.create_topic("t")
        for i in range(51):
            engine.create_subscription("t", f"s{i}")
        assert engine.create_queue("long", default_ttl_s=7200).default_ttl_s == 7200
        engine.create_queue("wide", max_message_size_kb=1024)
        engine.send("wide", [OutboundMessage(body=b"x" * (300 * 1024), time_to_live_s=7200)])
        (m,) = engine.peek(parse_address("wide"), 0, 1)
        assert m.time_to_live_s == 7200
