"""Topics: fan-out, correlation and SQL filters, SQL actions, filter exceptions, sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sbdlq.addresses import parse_address as A
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.errors import BadInput, InvalidOperation
from sbdlq.models import OutboundMessage

if TYPE_CHECKING:
    from conftest import Helpers


def _has_sqlfilter() -> bool:
    try:
        from sbdlq.sqlfilter import compile_action, compile_filter  # noqa: F401
    except ImportError:
        return False
    return True


needs_sql = pytest.mark.skipif(not _has_sqlfilter(), reason="sbdlq.sqlfilter is not there yet")


def sub(name: str) -> str:
    return f"t/Subscriptions/{name}"


def test_every_subscription_gets_a_copy(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    for name in ("a", "b", "c"):
        engine.create_subscription("t", name)
    seqs = engine.send("t", h.msgs(2))
    for name in ("a", "b", "c"):
        got = engine.peek(A(sub(name)), 0, 10)
        assert h.ids(got) == ["m0", "m1"]
        assert [m.sequence_number for m in got] == seqs
    # Settling in one subscription leaves the others alone.
    h.drain(sub("a"))
    assert engine.counts(sub("a")).active == 0 and engine.counts(sub("b")).active == 2


def test_topic_without_subscriptions_accepts_and_drops(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    assert engine.send("t", h.msgs(1)) == [1]


def test_copies_are_independent(engine: Engine) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "a")
    engine.create_subscription("t", "b")
    engine.send("t", [OutboundMessage(body=b"x", application_properties={"n": 1})])
    (m,) = engine.receive(A(sub("a")), 1)
    engine.abandon(A(sub("a")), [m.lock_token], properties={"n": 2})
    assert engine.peek(A(sub("b")), 0, 1)[0].application_properties == {"n": 1}


def test_disabled_subscription_gets_nothing(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "on")
    engine.create_subscription("t", "off", status="Disabled")
    engine.send("t", h.msgs(1))
    assert engine.counts(sub("on")).active == 1
    assert engine.counts(sub("off")).active == 0


CORRELATION_CASES: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ({"ContentType": "application/json"}, {"content_type": "application/json"}, {"content_type": "text/plain"}),
    ({"CorrelationId": "c1"}, {"correlation_id": "c1"}, {"correlation_id": "c2"}),
    ({"Label": "red"}, {"subject": "red"}, {"subject": "blue"}),
    ({"Subject": "red"}, {"subject": "red"}, {"subject": None}),
    ({"MessageId": "id-1"}, {"message_id": "id-1"}, {"message_id": "id-2"}),
    ({"ReplyTo": "r"}, {"reply_to": "r"}, {"reply_to": "s"}),
    ({"ReplyToSessionId": "rs"}, {"reply_to_session_id": "rs"}, {}),
    ({"SessionId": "s1"}, {"session_id": "s1"}, {"session_id": "s2"}),
    ({"To": "x"}, {"to": "x"}, {"to": "y"}),
    ({"Properties": {"prop1": "value1"}}, {"application_properties": {"prop1": "value1"}}, {}),
    (
        {"Properties": {"n": 5, "flag": True}},
        {"application_properties": {"n": 5, "flag": True, "other": "x"}},
        {"application_properties": {"n": 5}},
    ),
    (
        {"Label": "red", "Properties": {"tenant": "eu"}},
        {"subject": "red", "application_properties": {"tenant": "eu"}},
        {"subject": "red", "application_properties": {"tenant": "us"}},
    ),
    # Key spellings the config loader or the admin SDK may hand over.
    ({"correlation_id": "c1"}, {"correlation_id": "c1"}, {"correlation_id": "c2"}),
    ({"application_properties": {"k": "v"}}, {"application_properties": {"k": "v"}}, {}),
    # A key set to null is not part of the match.
    ({"ContentType": None, "To": "x"}, {"to": "x"}, {"to": "y"}),
]


@pytest.mark.parametrize(("flt", "match", "miss"), CORRELATION_CASES)
def test_correlation_filter(engine: Engine, flt: dict[str, Any], match: dict[str, Any], miss: dict[str, Any]) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s", rules=[Rule("r", correlation=flt)])
    engine.send("t", [OutboundMessage(body=b"", **{"message_id": "miss", **miss})])
    engine.send("t", [OutboundMessage(body=b"", **{"message_id": "match", **match})])
    got = engine.peek(A(sub("s")), 0, 10)
    assert len(got) == 1
    for k, v in match.items():
        assert getattr(got[0], k) == v


def test_several_rules_are_or_and_give_one_copy(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    engine.create_subscription(
        "t", "s", rules=[Rule("red", correlation={"Label": "red"}), Rule("eu", correlation={"Properties": {"r": "eu"}})]
    )
    engine.send(
        "t",
        [
            OutboundMessage(body=b"", message_id="both", subject="red", application_properties={"r": "eu"}),
            OutboundMessage(body=b"", message_id="red", subject="red"),
            OutboundMessage(body=b"", message_id="none", subject="blue"),
        ],
    )
    assert h.peek_ids(sub("s")) == ["both", "red"]


def test_subscription_without_rules_gets_nothing(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s", rules=[])
    engine.send("t", h.msgs(1))
    assert engine.counts(sub("s")).active == 0


def test_false_filter(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s", rules=[Rule("never", sql="1=0")])
    engine.send("t", h.msgs(1))
    assert engine.counts(sub("s")).active == 0


@needs_sql
def test_sql_filter(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s", rules=[Rule("sql", sql="sys.MessageId = '123456' AND userProp1 = 'value1'")])
    engine.create_subscription("t", "big", rules=[Rule("big", sql="amount > 100 AND sys.Label LIKE 'ord%'")])
    engine.send(
        "t",
        [
            OutboundMessage(body=b"", message_id="123456", application_properties={"userProp1": "value1"}),
            OutboundMessage(body=b"", message_id="123456", application_properties={"userProp1": "other"}),
            OutboundMessage(body=b"", message_id="x", subject="order", application_properties={"amount": 500}),
            OutboundMessage(body=b"", message_id="y", subject="order", application_properties={"amount": 5}),
        ],
    )
    assert [m.application_properties.get("userProp1") for m in engine.peek(A(sub("s")), 0, 10)] == ["value1"]
    assert h.peek_ids(sub("big")) == ["x"]


@needs_sql
def test_sql_action_changes_the_subscriptions_copy_only(engine: Engine) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s", rules=[Rule("act", sql="1=1", action="SET sys.To = 'Entity'; SET n = 7")])
    engine.create_subscription("t", "plain")
    engine.send("t", [OutboundMessage(body=b"", message_id="m", application_properties={"n": 1})])
    (m,) = engine.peek(A(sub("s")), 0, 1)
    assert m.to == "Entity" and m.application_properties["n"] == 7
    (p,) = engine.peek(A(sub("plain")), 0, 1)
    assert p.to is None and p.application_properties["n"] == 1


@needs_sql
def test_invalid_sql_rule_is_refused_at_creation(engine: Engine) -> None:
    engine.create_topic("t")
    with pytest.raises(BadInput):
        engine.create_subscription("t", "s", rules=[Rule("bad", sql="amount >>> 1")])
    with pytest.raises(BadInput):
        engine.create_subscription("t", "s2", rules=[Rule("bad", sql="1=1", action="SET")])


def _failing_filter_text() -> str:
    """A filter that compiles but fails to evaluate on a message whose `n` is a string."""
    from sbdlq.sqlfilter import FilterEvaluationError, compile_filter

    for text in ("n / 0 = 1", "n + 1 = 2", "n * 2 > 1", "n > 1"):
        try:
            compile_filter(text).matches({}, {"n": "abc"})
        except FilterEvaluationError:
            return text
    pytest.skip("the SQL evaluator raises on none of the candidate expressions")


@needs_sql
@pytest.mark.parametrize("flag", [True, False])
def test_filter_exception_dead_letters_with_the_flag(engine: Engine, flag: bool) -> None:
    from sbdlq.sqlfilter import FilterEvaluationError, compile_filter

    text = _failing_filter_text()
    try:
        compile_filter(text).matches({}, {"n": "abc"})
    except FilterEvaluationError as exc:
        expected = (exc.type_name, exc.message)
    engine.create_topic("t")
    engine.create_subscription("t", "s", rules=[Rule("f", sql=text)], dead_lettering_on_filter_exceptions=flag)
    engine.create_subscription("t", "other")
    engine.send("t", [OutboundMessage(body=b"", message_id="m", application_properties={"n": "abc"})])
    c = engine.counts(sub("s"))
    assert c.active == 0
    assert engine.counts(sub("other")).active == 1
    if flag:
        (d,) = engine.peek(A(sub("s") + "/$DeadLetterQueue"), 0, 1)
        assert (d.dead_letter_reason, d.dead_letter_error_description) == expected
        assert d.message_id == "m"
    else:
        assert c.dead_letter == 0


def test_null_session_id_on_a_session_subscription_dead_letters(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "sess", requires_session=True)
    engine.create_subscription("t", "plain")
    engine.send("t", [OutboundMessage(body=b"", message_id="nosession")])
    engine.send("t", [OutboundMessage(body=b"", message_id="withsession", session_id="s1")])
    assert h.peek_ids(sub("sess")) == ["withsession"]
    (d,) = engine.peek(A(sub("sess") + "/$DeadLetterQueue"), 0, 10)
    assert d.message_id == "nosession"
    assert d.dead_letter_reason == "Session id is null."
    assert d.dead_letter_error_description == (
        "Session enabled entity doesn't allow a message whose session identifier is null."
    )
    assert h.peek_ids(sub("plain")) == ["nosession", "withsession"]


def test_sending_without_session_id_to_a_session_queue_is_refused(engine: Engine) -> None:
    engine.create_queue("q", requires_session=True)
    with pytest.raises(InvalidOperation, match="SessionId"):
        engine.send("q", [OutboundMessage(body=b"", session_id="s"), OutboundMessage(body=b"")])
    assert engine.counts("q").active == 0  # all or nothing
    engine.send("q", [OutboundMessage(body=b"", session_id="s")])
    assert engine.counts("q").active == 1


def test_receive_by_session(engine: Engine, h: Helpers) -> None:
    engine.create_queue("q", requires_session=True)
    engine.send("q", [OutboundMessage(body=b"", message_id=f"m{i}", session_id=f"s{i % 2}") for i in range(4)])
    assert h.ids(engine.receive(A("q"), 10, session_id="s1")) == ["m1", "m3"]


@needs_sql
def test_failing_action_dead_letters_like_a_failing_filter(engine: Engine) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "s", rules=[Rule("a", sql="1=1", action="SET n = n + 1")])
    engine.send("t", [OutboundMessage(body=b"", message_id="m", application_properties={"n": "abc"})])
    (d,) = engine.peek(A(sub("s") + "/$DeadLetterQueue"), 0, 1)
    assert d.dead_letter_reason == "InvalidOperationException"
    assert "'+'" in (d.dead_letter_error_description or "")
    assert d.application_properties["n"] == "abc"  # the original message, not a half-applied action


def test_oversized_headers_through_a_topic_land_in_each_subscription_dlq(engine: Engine) -> None:
    engine.create_topic("t")
    engine.create_subscription("t", "a")
    engine.create_subscription("t", "b")
    engine.send("t", [OutboundMessage(body=b"", application_properties={"p": "x" * 70_000})])
    for name in ("a", "b"):
        c = engine.counts(sub(name))
        assert (c.active, c.dead_letter) == (0, 1)
        assert engine.peek(A(sub(name) + "/$DeadLetterQueue"), 0, 1)[0].dead_letter_reason == "HeaderSizeExceeded"


def test_rules_are_listed_as_created(engine: Engine) -> None:
    engine.create_topic("t")
    rules = [Rule("c", correlation={"Label": "x", "Properties": {"k": 1}}), Rule("s", sql="1=1", action=None)]
    engine.create_subscription("t", "s", rules=rules)
    assert engine.rules(sub("s")) == rules


@needs_sql
def test_sql_parameters_route_and_survive_the_store(engine: Engine, h: Helpers) -> None:
    from datetime import UTC, datetime, timedelta

    when = datetime(2030, 1, 1, tzinfo=UTC)
    parameters = {"@region": "eu", "@min": 3, "@until": when, "@span": timedelta(minutes=5)}
    rule = Rule(
        "p",
        sql="region = @region AND priority >= @min",
        parameters=parameters,
        action="SET tagged = @tag",
        action_parameters={"@tag": "eu-high"},
    )
    engine.create_topic("t")
    engine.create_subscription("t", "s", rules=[rule])
    assert engine.rules(sub("s")) == [rule]  # the typed values come back from the store
    engine.send(
        "t",
        [
            OutboundMessage(body=b"", message_id=i, application_properties={"region": r, "priority": p})
            for i, r, p in (("low", "eu", 1), ("us", "us", 5), ("hit", "eu", 4))
        ],
    )
    (got,) = engine.peek(A(sub("s")), 0, 10)
    assert (got.message_id, got.application_properties["tagged"]) == ("hit", "eu-high")


@needs_sql
def test_a_parameter_without_a_value_is_refused_at_creation(engine: Engine) -> None:
    engine.create_topic("t")
    with pytest.raises(BadInput, match="parameter @region has no value"):
        engine.create_subscription("t", "s", rules=[Rule("p", sql="region = @region", parameters={"@other": 1})])
    with pytest.raises(BadInput, match="must begin with @"):
        engine.create_subscription("t", "s", rules=[Rule("p", sql="region = @region", parameters={"region": 1})])


def test_true_and_false_filters_keep_their_type(engine: Engine, h: Helpers) -> None:
    engine.create_topic("t")
    rules = [Rule.false("none"), Rule("zero", sql="1=0")]
    engine.create_subscription("t", "s", rules=rules)
    engine.create_subscription("t", "all")
    listed = [(r.name, r.sql, r.constant) for r in engine.rules(sub("s"))]
    assert listed == [("none", "1=0", False), ("zero", "1=0", None)]
    assert [(r.name, r.constant) for r in engine.rules(sub("all"))] == [("$Default", True)]
    engine.send("t", h.msgs(1))
    assert (engine.counts(sub("s")).active, engine.counts(sub("all")).active) == (0, 1)
