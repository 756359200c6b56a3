"""The Service Bus SQL filter / action grammar: matching, errors, actions, message context."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sbdlq.errors import BadInput, ExitStatus, SbdlqError
from sbdlq.models import Message, OutboundMessage
from sbdlq.sqlfilter import (
    FilterEvaluationError,
    SqlAction,
    SqlFilter,
    SqlFilterSyntaxError,
    compile_action,
    compile_filter,
    message_context,
)

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

SYSTEM: dict[str, Any] = {
    "MessageId": "m-1",
    "CorrelationId": "c-1",
    "Label": "Order.Created",
    "To": "store5",
    "ContentType": "application/json",
    "DeliveryCount": 3,
    "SequenceNumber": 42,
    "EnqueuedTimeUtc": NOW,
    "TimeToLive": timedelta(hours=1),
    "Size": 120,
    "SessionId": None,
}

PROPS: dict[str, Any] = {
    "color": "red",
    "quantity": 10,
    "price": 2.5,
    "vip": True,
    "DeadLetterReason": "MaxDeliveryCountExceeded",
    "Property With Space": "x",
    "HR-EmployeeID": 7,
    "Contoso & Northwind": "yes",
    "a]b": 1,
    "nothing": None,
    "pct": "50%",
    "created": NOW - timedelta(days=1),
}

T, F, U = True, False, None  # TRUE, FALSE, unknown


def outcome(expr: str) -> bool | None:
    """TRUE, FALSE or unknown, told apart with the public API: unknown matches neither way."""
    if compile_filter(expr).matches(SYSTEM, PROPS):
        return True
    if compile_filter(f"NOT ({expr})").matches(SYSTEM, PROPS):
        return False
    return None


MATCH_CASES = [
    # TrueFilter / FalseFilter texts
    ("1=1", T),
    ("1=0", F),
    ("TRUE", T),
    ("NOT FALSE", T),
    # system properties: names case-insensitive, Subject = Label, values case-sensitive
    ("sys.Label = 'Order.Created'", T),
    ("sys.label = 'Order.Created'", T),
    ("SYS.LABEL = 'Order.Created'", T),
    ("sys.Subject = 'Order.Created'", T),
    ("sys.Label = 'order.created'", F),
    ("sys.DeliveryCount > 2", T),
    ("sys.SequenceNumber = 42", T),
    # user properties: bare, user. scope, names case-insensitive
    ("color = 'red'", T),
    ("COLOR = 'red'", T),
    ("user.color = 'red'", T),
    ("User.Color = 'red'", T),
    ("color <> 'blue'", T),
    ("color != 'red'", F),
    # delimited and quoted identifiers
    ("[Property With Space] = 'x'", T),
    ("[HR-EmployeeID] = 7", T),
    ("[a]]b] = 1", T),
    ("\"Contoso & Northwind\" = 'yes'", T),
    # numbers and arithmetic (C# semantics: Int64 division truncates, % keeps the dividend's sign)
    ("quantity > 5", T),
    ("quantity >= 10", T),
    ("quantity < 10", F),
    ("quantity <= 9.5", F),
    ("quantity = 10.0", T),
    ("price * 4 = 10", T),
    ("quantity / 4 = 2", T),
    ("quantity % 4 = 2", T),
    ("-7 / 2 = -3", T),
    ("-7 % 3 = -1", T),
    ("-quantity = -10", T),
    ("(quantity + 2) * 2 = 24", T),
    ("quantity + 2 * 2 = 14", T),
    ("quantity - 2 - 3 = 5", T),
    ("1.5E1 = 15", T),
    ("0.5E-2 = 0.005", T),
    ("2.0 = 2", T),
    # strings
    ("'it''s' = 'it''s'", T),
    ("'x' + 'y' = 'xy'", T),
    ("color > 'blue'", T),
    # unknown (missing properties) and three-valued logic
    ("missing = 1", U),
    ("missing <> 1", U),
    ("NOT missing = 1", U),
    ("missing + 1 = 2", U),
    ("missing / 0 = 1", U),
    ("missing = 1 OR color = 'red'", T),
    ("missing = 1 OR color = 'blue'", U),
    ("missing = 1 AND color = 'red'", U),
    ("missing = 1 AND color = 'blue'", F),
    ("nothing = 1", U),
    ("color = NULL", U),
    # IS [NOT] NULL and EXISTS
    ("missing IS NULL", T),
    ("nothing IS NULL", T),
    ("color IS NULL", F),
    ("color IS NOT NULL", T),
    ("sys.SessionId IS NULL", T),
    ("sys.ReplyTo IS NULL", T),
    ("EXISTS(color)", T),
    ("EXISTS (nothing)", T),
    ("EXISTS(missing)", F),
    ("NOT EXISTS(missing)", T),
    ("EXISTS(sys.To)", T),
    ("EXISTS(sys.ReplyTo)", F),
    # IN / NOT IN
    ("color IN ('blue', 'red')", T),
    ("color NOT IN ('blue', 'red')", F),
    ("quantity IN (1, 10.0)", T),
    ("quantity IN (1, quantity - 1)", F),
    ("missing IN ('a')", U),
    ("missing NOT IN ('a')", U),
    ("sys.To IN ('Store5', 'store5')", T),
    ("vip IN (1)", F),
    # LIKE / NOT LIKE / ESCAPE
    ("sys.Label LIKE 'Order.%'", T),
    ("sys.Label LIKE '%Created'", T),
    ("sys.Label LIKE '%der%'", T),
    ("sys.Label LIKE 'Order_Created'", T),
    ("sys.Label LIKE 'O%.C%d'", T),
    ("sys.Label LIKE 'order%'", F),
    ("color LIKE 'r.d'", F),
    ("color NOT LIKE 'r%'", F),
    ("pct LIKE '50!%' ESCAPE '!'", T),
    ("color LIKE 're!%' ESCAPE '!'", F),
    ("pct LIKE '5_\\%' ESCAPE '\\'", T),
    ("color LIKE p('color')", T),
    ("missing LIKE 'a%'", U),
    ("quantity LIKE '1%'", U),
    # types that don't compare give unknown, not an error
    ("color = 1", U),
    ("vip = TRUE", T),
    ("vip = 1", U),
    ("vip > FALSE", U),
    # times and time spans (strings stand for them: the grammar has no such literals)
    ("sys.EnqueuedTimeUtc > '2024-04-30T00:00:00Z'", T),
    ("'2024-04-30' < sys.EnqueuedTimeUtc", T),
    ("created < sys.EnqueuedTimeUtc", T),
    ("sys.EnqueuedTimeUtc - created > '12:00:00'", T),
    ("sys.TimeToLive = '01:00:00'", T),
    ("sys.TimeToLive > 'PT30M'", T),
    ("sys.EnqueuedTimeUtc IN ('2024-05-01T12:00:00+00:00')", T),
    ("sys.EnqueuedTimeUtc > 'not a date'", U),
    # functions
    ("p('color') = 'red'", T),
    ("property('sys.Label') = 'Order.Created'", T),
    ("property('user.' + 'quantity') = 10", T),
    ("newid() <> newid()", T),
    # keywords are case-insensitive; precedence NOT > AND > OR
    ("color in ('red') and not quantity is null", T),
    ("color = 'blue' AND quantity = 1 OR sys.To = 'store5'", T),
    ("NOT color = 'blue' AND quantity = 10", T),
    ("quantity = 0 AND quantity / 0 = 1", F),
    # long flat chains stay shallow
    ("quantity = 0 OR " * 60 + "quantity = 10", T),
    ("quantity" + " + 1" * 200 + " = 210", T),
]


@pytest.mark.parametrize(("expr", "expected"), MATCH_CASES)
def test_filter_outcome(expr: str, expected: bool | None) -> None:
    assert outcome(expr) is expected


SYNTAX_CASES = [
    ("", 1, "unexpected end of expression"),
    ("color = ", 9, "unexpected end of expression"),
    ("color = 'red')", 14, "unexpected ')'"),
    ("(color = 'red'", 15, "expected ')'"),
    ("color = 'red", 9, "unterminated string constant"),
    ("[color = 1", 1, "unterminated delimited identifier"),
    ("[] = 1", 1, "empty delimited identifier"),
    ("sys.Nope = 1", 5, "unknown system property 'sys.Nope'"),
    ("bar.baz = 1", 1, "unknown scope 'bar'"),
    ("color", 1, "expected a condition"),
    ("color = 'a' AND quantity", 17, "expected a condition"),
    ("a = 1 = 2", 7, "'=' cannot be applied to a condition"),
    ("(a = 1) + 1 = 2", 9, "'+' cannot be applied to a condition"),
    ("a LIKE 'x!' ESCAPE '!'", 8, "ends with the escape character"),
    ("a LIKE 'x' ESCAPE '!!'", 19, "string of length 1"),
    ("a LIKE 5", 8, "must be a string"),
    ("quantity + 1 IS NULL", 1, "applies to a property"),
    ("a IS 1", 6, "unexpected '1' (expected 'NULL')"),
    ("foo(1) = 1", 1, "unknown function 'foo'"),
    ("a = 99999999999999999999", 5, "out of range"),
    ("a = 1e", 5, "malformed number"),
    ("a = @p", 5, "parameter @p has no value"),
    ("a = @", 5, "unexpected character '@'"),
    ("AND = 1", 1, "unexpected 'AND'"),
    ("a IN ()", 7, "unexpected ')'"),
    ("EXISTS(1)", 8, "expected a property name"),
    ("a NOT = 1", 3, "unexpected 'NOT'"),
    ("(" * 70 + "1=1" + ")" * 70, 65, "nested too deeply"),
    ("NOT " * 80 + "1=1", None, "nested too deeply"),
    ("a = " + "-" * 100 + "1", None, "nested too deeply"),
    ("a = '" + "x" * 1100 + "'", None, "the maximum is 1024"),
]


@pytest.mark.parametrize(("expr", "position", "fragment"), SYNTAX_CASES)
def test_syntax_errors(expr: str, position: int | None, fragment: str) -> None:
    with pytest.raises(SqlFilterSyntaxError) as info:
        compile_filter(expr)
    assert fragment in info.value.message
    if position is not None:
        assert info.value.position == position
        assert info.value.message.startswith(f"syntax error at position {position}: ")


def test_syntax_error_is_bad_input() -> None:
    with pytest.raises(BadInput) as info:
        compile_filter("a =")
    assert info.value.exit_status == ExitStatus.USAGE


def test_limit_is_1024_characters() -> None:
    expr = "a = '" + "x" * 1018 + "'"
    assert len(expr) == 1024
    assert compile_filter(expr).expression == expr
    with pytest.raises(SqlFilterSyntaxError):
        compile_filter(expr + " ")


EVAL_ERROR_CASES = [
    ("quantity / 0 = 1", "DivideByZeroException", "Attempted to divide by zero."),
    ("quantity % 0 = 1", "DivideByZeroException", "Attempted to divide by zero."),
    ("price / 0 = 1", "DivideByZeroException", "Attempted to divide by zero."),
    ("color - 1 = 1", "InvalidOperationException", "'System.String' and 'System.Int64'"),
    ("color + 1 = 1", "InvalidOperationException", "Operator '+'"),
    ("-color = 1", "InvalidOperationException", "operand of type 'System.String'"),
    ("vip + 1 = 2", "InvalidOperationException", "'System.Boolean'"),
    ("p('sys.Nope') = 1", "FilterException", "sys.Nope"),
    ("p(1) = 1", "InvalidCastException", "System.Int64"),
    ("color LIKE 'r%' ESCAPE p('pct')", "ArgumentException", "length 1"),
]


@pytest.mark.parametrize(("expr", "type_name", "fragment"), EVAL_ERROR_CASES)
def test_evaluation_errors(expr: str, type_name: str, fragment: str) -> None:
    flt = compile_filter(expr)
    with pytest.raises(FilterEvaluationError) as info:
        flt.matches(SYSTEM, PROPS)
    assert info.value.type_name == type_name
    assert fragment in info.value.message
    assert not isinstance(info.value, SbdlqError)


def test_compiled_filter_keeps_text_and_is_reusable() -> None:
    flt = compile_filter("quantity > 5")
    assert isinstance(flt, SqlFilter)
    assert flt.expression == "quantity > 5"
    assert flt.matches({}, {"quantity": 6}) is True
    assert flt.matches({}, {"quantity": 5}) is False
    assert flt.matches({}, {}) is False


def test_evaluation_never_reparses(monkeypatch: pytest.MonkeyPatch) -> None:
    flt = compile_filter("sys.Label = 'Order.Created' AND quantity > 5")

    def no_tokenize(text: str) -> list[Any]:
        raise AssertionError("matches() re-parsed the expression")

    monkeypatch.setattr("sbdlq.sqlfilter.lexer.tokenize", no_tokenize)
    monkeypatch.setattr("sbdlq.sqlfilter.parser.tokenize", no_tokenize, raising=False)
    for _ in range(3):
        assert flt.matches(SYSTEM, PROPS) is True


ACTION_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("SET quantity = quantity / 2", {}, {"quantity": 5}),
    ("SET sys.Label = 'routed'", {"Label": "routed"}, {}),
    ("SET sys.subject = 'y'", {"Label": "y"}, {}),
    ("SET Color = 'blue'", {}, {"color": "blue"}),
    ("SET a = 1; SET b = a + 1", {}, {"a": 1, "b": 2}),
    ("SET a = 1 SET b = 2;", {}, {"a": 1, "b": 2}),
    ("set price = 3", {}, {"price": 3.0}),
    ("SET x = missing", {}, {"x": None}),
    ("SET [new prop] = sys.DeliveryCount * 10", {}, {"new prop": 30}),
    ("SET sys.TimeToLive = '00:05:00'", {"TimeToLive": timedelta(minutes=5)}, {}),
    (
        "SET sys.ScheduledEnqueueTimeUtc = '2024-06-01T00:00:00Z'",
        {"ScheduledEnqueueTimeUtc": NOW.replace(month=6, day=1, hour=0)},
        {},
    ),
    ("SET sys.CorrelationId = NULL", {"CorrelationId": None}, {}),
]


@pytest.mark.parametrize(("expr", "sys_changes", "prop_changes"), ACTION_CASES)
def test_actions(expr: str, sys_changes: dict[str, Any], prop_changes: dict[str, Any]) -> None:
    system, props = dict(SYSTEM), dict(PROPS)
    action = compile_action(expr)
    assert isinstance(action, SqlAction)
    action.apply(system, props)
    assert system == SYSTEM | sys_changes
    assert props == PROPS | prop_changes


@pytest.mark.parametrize("expr", ["REMOVE color", "REMOVE COLOR", "remove user.Color;"])
def test_remove_is_case_insensitive(expr: str) -> None:
    props = dict(PROPS)
    compile_action(expr).apply(dict(SYSTEM), props)
    assert "color" not in props
    assert len(props) == len(PROPS) - 1


@pytest.mark.parametrize("expr", ["SET id = newid()", "SET sys.MessageId = newid()"])
def test_newid_is_stored_as_text(expr: str) -> None:
    system, props = dict(SYSTEM), dict(PROPS)
    compile_action(expr).apply(system, props)
    value = props["id"] if "id" in props else system["MessageId"]
    assert isinstance(value, str)
    assert uuid.UUID(value).version == 4


ACTION_SYNTAX_CASES = [
    ("", "empty action"),
    ("SET sys.DeliveryCount = 1", "'sys.DeliveryCount' cannot be SET"),
    ("SET sys.EnqueuedTimeUtc = '2024-01-01'", "cannot be SET"),
    ("REMOVE sys.Label", "cannot REMOVE system property 'sys.Label'"),
    ("UPDATE a = 1", "expected SET or REMOVE"),
    ("SET a 1", "expected '='"),
    ("SET a = 1;;", "unexpected ';'"),
    ("SET a = b > 1", "cannot be applied to a condition"),
    ("SET sys.Bogus = 1", "unknown system property 'sys.Bogus'"),
    ("SET a = 1;" * 33, "more than 32 statements"),
]


@pytest.mark.parametrize(("expr", "fragment"), ACTION_SYNTAX_CASES)
def test_action_syntax_errors(expr: str, fragment: str) -> None:
    with pytest.raises(SqlFilterSyntaxError) as info:
        compile_action(expr)
    assert fragment in info.value.message


ACTION_ERROR_CASES = [
    ("SET a = 1; SET sys.Label = 5", "InvalidCastException", "System.String"),
    ("SET sys.TimeToLive = 'soon'", "InvalidCastException", "System.TimeSpan"),
    ("SET sys.TimeToLive = '-00:01:00'", "ArgumentOutOfRangeException", "positive"),
    ("REMOVE color; SET q = quantity / 0", "DivideByZeroException", "divide by zero"),
]


@pytest.mark.parametrize(("expr", "type_name", "fragment"), ACTION_ERROR_CASES)
def test_action_errors_leave_message_unchanged(expr: str, type_name: str, fragment: str) -> None:
    system, props = dict(SYSTEM), dict(PROPS)
    action = compile_action(expr)
    with pytest.raises(FilterEvaluationError) as info:
        action.apply(system, props)
    assert info.value.type_name == type_name
    assert fragment in info.value.message
    assert system == SYSTEM
    assert props == PROPS


def _message() -> Message:
    return Message(
        sequence_number=7,
        body=b"hello",
        enqueued_time=NOW,
        message_id="id-7",
        expires_at=NOW + timedelta(days=14),
        delivery_count=2,
        subject="invoice",
        correlation_id="corr",
        time_to_live_s=60.0,
        application_properties={"DeadLetterReason": "Bad", "tenant": "acme"},
        dead_letter_source="orders",
    )


def test_message_context_for_a_broker_message() -> None:
    msg = _message()
    system, props = message_context(msg)
    assert system["Label"] == "invoice"
    assert system["MessageId"] == "id-7"
    assert system["SequenceNumber"] == 7
    assert system["DeliveryCount"] == 2
    assert system["EnqueuedTimeUtc"] == NOW
    assert system["ExpiresAtUtc"] == NOW + timedelta(days=14)
    assert system["TimeToLive"] == timedelta(seconds=60)
    assert system["DeadLetterSource"] == "orders"
    assert system["Size"] == 5
    assert props == {"DeadLetterReason": "Bad", "tenant": "acme"}
    props["tenant"] = "changed"
    assert msg.application_properties["tenant"] == "acme"  # a copy, not the message's dict


def test_message_context_for_an_outbound_message() -> None:
    msg = OutboundMessage(body=b"abc", subject="s", to="t", application_properties={"k": 1})
    system, props = message_context(msg)
    assert system["Label"] == "s"
    assert system["To"] == "t"
    assert system["TimeToLive"] is None
    assert system["Size"] == 3
    for broker_field in ("SequenceNumber", "DeliveryCount", "EnqueuedTimeUtc", "LockToken"):
        assert broker_field not in system
    assert props == {"k": 1}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("sys.Label = 'invoice' AND DeadLetterReason = 'Bad'", True),
        ("sys.DeadLetterSource = 'orders' AND sys.DeliveryCount >= 2", True),
        ("sys.ExpiresAtUtc - sys.EnqueuedTimeUtc = '14.00:00:00'", True),
        ("sys.Size > 5", False),
        ("Tenant LIKE 'ac%'", True),
    ],
)
def test_filters_over_message_context(expr: str, expected: bool) -> None:
    assert compile_filter(expr).matches(*message_context(_message())) is expected


def test_outbound_message_has_no_sequence_number() -> None:
    outbound = OutboundMessage(subject="s")
    assert compile_filter("sys.SequenceNumber IS NULL AND sys.Label = 's'").matches(*message_context(outbound))


# --- parameters (`SqlRuleFilter("... @name ...", parameters={"@name": v})`) ---------------------


@pytest.mark.parametrize(
    ("expr", "parameters", "props", "expected"),
    [
        ("color = @color", {"@color": "red"}, {"color": "red"}, True),
        ("color = @color", {"@color": "red"}, {"color": "blue"}, False),
        ("n > @min AND n < @max", {"@min": 1, "@max": 10}, {"n": 5}, True),
        ("n > @min", {"@min": 2.5}, {"n": 2}, False),
        ("flag = @on", {"@on": True}, {"flag": True}, True),
        ("color = @Color", {"@color": "red"}, {"color": "red"}, True),  # names compare without case
        ("color IN (@a, @b)", {"@a": "x", "@b": "red"}, {"color": "red"}, True),
        ("code LIKE @pattern", {"@pattern": "ab%"}, {"code": "abc"}, True),
        ("at < @when", {"@when": datetime(2030, 1, 1, tzinfo=UTC)}, {"at": datetime(2029, 1, 1, tzinfo=UTC)}, True),
        ("span > @d", {"@d": timedelta(minutes=1)}, {"span": timedelta(minutes=2)}, True),
        ("color = @none", {"@none": None}, {"color": "red"}, None),
        ("'@color' = '@color'", {}, {}, True),  # inside a string it is text
    ],
)
def test_parameters_stand_for_their_values(
    expr: str, parameters: dict[str, Any], props: dict[str, Any], expected: bool | None
) -> None:
    from sbdlq.sqlfilter.evaluator import compile_node
    from sbdlq.sqlfilter.parser import parse_filter

    assert compile_node(parse_filter(expr, parameters))({}, props) is expected
    assert compile_filter(expr, parameters).matches({}, props) is (expected is True)


@pytest.mark.parametrize(
    ("expr", "parameters", "fragment"),
    [
        ("a = @p", {"@q": 1}, "parameter @p has no value"),
        ("a = @p", {"p": 1}, "parameter name 'p' must begin with @"),
        ("a = @p", {"@": 1}, "must begin with @"),
        ("a = @p", {"@p": [1]}, "parameter @p has a value of type list"),
        ("a LIKE @p", {"@p": 5}, "a LIKE pattern must be a string"),
    ],
)
def test_parameter_errors(expr: str, parameters: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SqlFilterSyntaxError) as info:
        compile_filter(expr, parameters)
    assert fragment in info.value.message


def test_action_parameters() -> None:
    props: dict[str, Any] = {"n": 1}
    compile_action("SET n = n + @step; SET label = @label", {"@step": 2, "@label": "x"}).apply({}, props)
    assert props == {"n": 3, "label": "x"}
