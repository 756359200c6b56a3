"""Entities: creation, lookup, errors with the service's wording, status, reset."""

from __future__ import annotations

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.errors import BadInput, EntityDisabled, EntityNotFound, InvalidOperation
from sbdlq.models import OutboundMessage


def test_create_queue_with_properties(engine: Engine) -> None:
    info = engine.create_queue(
        "orders",
        lock_duration_s=30,
        max_delivery_count=3,
        default_ttl_s=3600,
        dead_lettering_on_expiration=True,
        requires_duplicate_detection=True,
        duplicate_window_s=20,
    )
    assert (info.path, info.kind, info.lock_duration_s, info.max_delivery_count) == ("orders", "queue", 30, 3)
    assert info.default_ttl_s == 3600 and info.dead_lettering_on_expiration and info.requires_duplicate_detection
    assert engine.get_entity("orders") == info
    assert engine.get_entity("ORDERS").path == "orders"  # entity names are case-insensitive


def test_defaults_follow_the_service(engine: Engine) -> None:
    info = engine.create_queue("q")
    assert info.max_delivery_count == 10
    assert info.lock_duration_s == 60
    assert not info.dead_lettering_on_expiration
    assert info.status == "Active"


def test_create_twice_is_refused_unless_exist_ok(engine: Engine) -> None:
    engine.create_queue("q")
    with pytest.raises(InvalidOperation, match="already exists"):
        engine.create_queue("q")
    assert engine.create_queue("q", exist_ok=True, max_delivery_count=5).max_delivery_count == 5
    with pytest.raises(BadInput):
        engine.create_topic("q", exist_ok=True)


def test_unknown_or_invalid_properties_are_bad_input(engine: Engine) -> None:
    with pytest.raises(BadInput):
        engine.create_queue("q", colour="blue")
    with pytest.raises(BadInput):
        engine.create_queue("q", max_delivery_count=0)
    with pytest.raises(BadInput):
        engine.create_queue("q", status="Paused")
    with pytest.raises(BadInput):
        engine.create_queue("-bad-")


def test_list_entities_topics_then_their_subscriptions(engine: Engine) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "b")
    engine.create_subscription("t", "a")
    engine.create_queue("q")
    paths = [e.path for e in engine.list_entities()]
    assert paths == ["q", "t", "t/Subscriptions/a", "t/Subscriptions/b"]
    assert engine.get_entity("t").subscription_count == 2


NOT_FOUND = "The messaging entity 'nope' could not be found."


@pytest.mark.parametrize(
    "call",
    [
        lambda e: e.get_entity("nope"),
        lambda e: e.counts("nope"),
        lambda e: e.send("nope", [OutboundMessage(body=b"x")]),
        lambda e: e.peek(A("nope"), 0, 10),
        lambda e: e.peek(A("nope/$DeadLetterQueue"), 0, 10),
        lambda e: e.receive(A("nope"), 1),
        lambda e: e.complete(A("nope"), ["x"]),
        lambda e: e.delete_entity("nope"),
        lambda e: e.set_status("nope", "Disabled"),
        lambda e: e.rules("nope"),
        lambda e: e.create_subscription("nope", "s"),
    ],
)
def test_missing_entities_raise_entity_not_found_with_service_wording(engine: Engine, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EntityNotFound) as info:
        call(engine)
    assert info.value.message == NOT_FOUND


def test_missing_subscription_names_its_full_path(engine: Engine) -> None:
    engine.create_topic("t")
    with pytest.raises(EntityNotFound, match=r"'t/Subscriptions/s' could not be found"):
        engine.receive(A("t/subscriptions/s/$DeadLetterQueue"), 1)


def test_topics_have_no_counts_and_cannot_be_read(engine: Engine) -> None:
    engine.create_topic("t")
    with pytest.raises(BadInput):
        engine.counts("t")
    with pytest.raises(BadInput):
        engine.receive(A("t"), 1)
    with pytest.raises(BadInput):
        engine.peek(A("t"), 0, 1)


def test_subscriptions_need_a_topic_and_refuse_sends(engine: Engine) -> None:
    engine.create_queue("q")
    with pytest.raises(BadInput):
        engine.create_subscription("q", "s")
    engine.create_topic("t")
    engine.create_subscription("t", "s")
    with pytest.raises(InvalidOperation):
        engine.send("t/Subscriptions/s", [OutboundMessage(body=b"x")])


def test_disabled_entity_refuses_sends(engine: Engine) -> None:
    engine.create_queue("q")
    engine.set_status("q", "Disabled")
    with pytest.raises(EntityDisabled, match="disabled"):
        engine.send("q", [OutboundMessage(body=b"x")])
    assert engine.counts("q").active == 0
    engine.set_status("q", "Active")
    engine.send("q", [OutboundMessage(body=b"x")])
    assert engine.counts("q").active == 1


def test_disabled_topic_refuses_sends(engine: Engine) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s")
    engine.set_status("t", "Disabled")
    with pytest.raises(EntityDisabled):
        engine.send("t", [OutboundMessage(body=b"x")])


def test_delete_topic_takes_subscriptions_and_messages(engine: Engine) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s")
    engine.send("t", [OutboundMessage(body=b"x")])
    engine.delete_entity("t")
    assert engine.list_entities() == []
    with pytest.raises(EntityNotFound):
        engine.counts("t/Subscriptions/s")
    engine.create_topic("t")
    engine.create_subscription("t", "s")
    assert engine.counts("t/Subscriptions/s").active == 0


def test_reset_empties_the_namespace(engine: Engine) -> None:
    engine.create_queue("q")
    engine.send("q", [OutboundMessage(body=b"x")])
    engine.reset()
    assert engine.list_entities() == []


def test_default_rule_takes_everything_and_exist_ok_keeps_rules(engine: Engine) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s")
    assert [r.name for r in engine.rules("t/Subscriptions/s")] == ["$Default"]
    engine.create_subscription("t", "c", rules=[Rule("only-red", correlation={"Subject": "red"})])
    # Updating properties without naming rules leaves the rules as they were.
    engine.create_subscription("t", "c", exist_ok=True, max_delivery_count=2)
    assert engine.rules("t/Subscriptions/c") == [Rule("only-red", correlation={"Subject": "red"})]
    assert engine.get_entity("t/Subscriptions/c").max_delivery_count == 2


def test_invalid_correlation_filter_key_is_bad_input(engine: Engine) -> None:
    engine.create_topic("t")
    with pytest.raises(BadInput):
        engine.create_subscription("t", "s", rules=[Rule("r", correlation={"Colour": "red"})])


def test_two_engines_on_one_store_see_each_others_entities(engine: Engine, db_path, clock) -> None:  # type: ignore[no-untyped-def]
    engine.create_queue("q")
    with Engine(db_path, clock=clock) as other:
        assert other.get_entity("q").path == "q"
        other.send("q", [OutboundMessage(body=b"x")])
    assert engine.counts("q").active == 1
