"""The selection options (DESIGN §5): each criterion, their AND, and the errors users see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sbdlq.errors import BadInput
from sbdlq.models import Message
from sbdlq.selection import Selection, build_selection, parse_property, parse_sequence_range

NOW = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


def msg(seq: int = 1, **fields: Any) -> Message:
    props = fields.pop("props", {})
    reason = fields.pop("reason", None)
    description = fields.pop("description", None)
    if reason is not None:
        props["DeadLetterReason"] = reason
    if description is not None:
        props["DeadLetterErrorDescription"] = description
    fields.setdefault("enqueued_time", NOW - timedelta(hours=1))
    return Message(sequence_number=seq, body=fields.pop("body", b"hello"), application_properties=props, **fields)


def test_an_empty_selection_takes_everything() -> None:
    sel = build_selection()
    assert sel.is_empty
    assert sel.matches(msg()) and sel.matches(msg(body=b"\xff"))
    assert (sel.first_sequence, sel.last_sequence) == (0, None)


def test_reasons_are_case_insensitive_and_any_of() -> None:
    sel = build_selection(reasons=["maxdeliverycountexceeded", "Poison"])
    assert sel.matches(msg(reason="MaxDeliveryCountExceeded"))
    assert sel.matches(msg(reason="POISON"))
    assert not sel.matches(msg(reason="TTLExpiredException"))
    assert not sel.matches(msg())
    # Whole reasons, not parts of them.
    assert not build_selection(reasons=["Max"]).matches(msg(reason="MaxDeliveryCountExceeded"))


def test_description_contains_ignores_case() -> None:
    sel = build_selection(description_contains="DELIVERY attempts")
    assert sel.matches(msg(description="Message could not be consumed after 10 delivery attempts."))
    assert not sel.matches(msg(description="expired"))
    assert not sel.matches(msg())


def test_subject_is_exact_and_an_empty_subject_means_none() -> None:
    assert build_selection(subject="orders").matches(msg(subject="orders"))
    assert not build_selection(subject="orders").matches(msg(subject="Orders"))
    none = build_selection(subject="")
    assert not none.is_empty
    assert none.matches(msg()) and not none.matches(msg(subject="orders"))


def test_properties_compare_as_text_and_all_must_match() -> None:
    sel = build_selection(properties=["tenant=eu", "attempt=3", "vip=true"])
    assert sel.matches(msg(props={"tenant": "eu", "attempt": 3, "vip": True}))
    assert not sel.matches(msg(props={"tenant": "eu", "attempt": 3}))
    assert not sel.matches(msg(props={"tenant": "us", "attempt": 3, "vip": True}))
    # A value may hold '='; an empty value matches an empty property, not a missing one.
    assert build_selection(properties=["q=a=b"]).matches(msg(props={"q": "a=b"}))
    assert build_selection(properties=["e="]).matches(msg(props={"e": ""}))
    assert not build_selection(properties=["e="]).matches(msg())


def test_enqueued_before_and_after_take_times_and_durations() -> None:
    sel = build_selection(enqueued_after="2h", enqueued_before="30m", now=NOW)
    assert sel.enqueued_after == NOW - timedelta(hours=2)
    assert sel.enqueued_before == NOW - timedelta(minutes=30)
    assert sel.matches(msg(enqueued_time=NOW - timedelta(hours=1)))
    assert not sel.matches(msg(enqueued_time=NOW - timedelta(minutes=10)))
    assert not sel.matches(msg(enqueued_time=NOW - timedelta(hours=3)))
    iso = build_selection(enqueued_before="2026-01-31T10:00:00+02:00")
    assert iso.enqueued_before == datetime(2026, 1, 31, 8, 0, tzinfo=UTC)
    naive = build_selection(enqueued_before="2026-01-31T10:00:00")
    assert naive.enqueued_before == datetime(2026, 1, 31, 10, 0, tzinfo=UTC)


def test_older_than_and_enqueued_before_keep_the_earlier_cutoff() -> None:
    sel = build_selection(older_than="7d", enqueued_before="1d", now=NOW)
    assert sel.enqueued_before == NOW - timedelta(days=7)
    sel = build_selection(older_than="1h", enqueued_before="1d", now=NOW)
    assert sel.enqueued_before == NOW - timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("42", (42, 42)), ("5-90", (5, 90)), (" 5 - 90 ", (5, 90)), ("7-", (7, 2**63 - 1)), ("-9", (0, 9))],
)
def test_sequence_ranges(text: str, expected: tuple[int, int]) -> None:
    assert parse_sequence_range(text) == expected


def test_sequences_select_and_bound_the_scan() -> None:
    sel = build_selection(sequences=["10-20", "40", "30-35"])
    assert (sel.first_sequence, sel.last_sequence) == (10, 40)
    assert [n for n in range(1, 50) if sel.matches(msg(n))] == [*range(10, 21), *range(30, 36), 40]


def test_body_contains_and_regex() -> None:
    assert build_selection(body_contains="order 7").matches(msg(body=b'{"text": "order 7"}'))
    assert not build_selection(body_contains="Order 7").matches(msg(body=b"order 7"))
    sel = build_selection(body_regex=r"^\{.*\"id\":\s*\d+")
    assert sel.matches(msg(body=b'{"x": 1, "id": 12}'))
    assert not sel.matches(msg(body=b'{"id": "x"}'))
    # Binary bodies are searched as text with replacement characters, never an error.
    assert build_selection(body_contains="abc").matches(msg(body=b"\xff\xfeabc"))


def test_where_reads_system_and_application_properties() -> None:
    sel = build_selection(where="sys.Label = 'orders' AND DeadLetterReason = 'Poison' AND sys.DeliveryCount > 2")
    assert sel.matches(msg(subject="orders", reason="Poison", delivery_count=3))
    assert not sel.matches(msg(subject="orders", reason="Poison", delivery_count=2))
    assert not sel.matches(msg(subject="billing", reason="Poison", delivery_count=3))
    seq = build_selection(where="sys.SequenceNumber >= 5 AND tenant IN ('eu', 'uk')")
    assert seq.matches(msg(5, props={"tenant": "uk"})) and not seq.matches(msg(4, props={"tenant": "uk"}))


def test_a_where_that_cannot_evaluate_on_a_message_skips_it() -> None:
    sel = build_selection(where="n + 1 > 2")
    assert sel.matches(msg(props={"n": 5}))
    assert not sel.matches(msg(props={"n": "text"}))


def test_criteria_combine_with_and() -> None:
    sel = build_selection(reasons=["Poison"], subject="orders", properties=["tenant=eu"], sequences=["1-10"])
    good = msg(3, reason="Poison", subject="orders", props={"tenant": "eu"})
    assert sel.matches(good)
    assert not sel.matches(msg(11, reason="Poison", subject="orders", props={"tenant": "eu"}))
    assert not sel.matches(msg(3, reason="Other", subject="orders", props={"tenant": "eu"}))
    assert not sel.matches(msg(3, reason="Poison", subject="billing", props={"tenant": "eu"}))


@pytest.mark.parametrize(
    ("options", "line"),
    [
        ({"properties": ["tenant"]}, "invalid --property 'tenant' (use NAME=VALUE)"),
        ({"properties": ["=x"]}, "invalid --property '=x' (use NAME=VALUE)"),
        ({"sequences": ["abc"]}, "invalid --sequence 'abc' (use N, N-M, N- or -M)"),
        ({"sequences": ["9-3"]}, "invalid --sequence '9-3': the range is empty"),
        ({"sequences": ["-"]}, "invalid --sequence '-' (use N, N-M, N- or -M)"),
        ({"body_regex": "("}, "invalid --body-regex '(': missing ), unterminated subpattern at position 0"),
        (
            {"enqueued_before": "yesterday"},
            "invalid --enqueued-before 'yesterday' (use ISO 8601 like 2026-01-31T12:00:00Z or a duration like 2h)",
        ),
        (
            {"older_than": "soon"},
            "invalid --older-than 'soon' (use e.g. 250ms, 30s, 5m, 2h, 3d or ISO 8601 like PT1M)",
        ),
        ({"where": "tenant ="}, "invalid --where expression: syntax error at position 9: unexpected end of expression"),
    ],
)
def test_bad_values_name_the_option(options: dict[str, Any], line: str) -> None:
    with pytest.raises(BadInput) as info:
        build_selection(**options)
    assert info.value.line() == line


def test_parse_property_keeps_the_value_verbatim() -> None:
    assert parse_property(" tenant =  eu ") == ("tenant", "  eu ")


def test_is_empty_notices_every_criterion() -> None:
    assert Selection().is_empty
    for options in (
        {"reasons": ["x"]},
        {"description_contains": ""},
        {"properties": ["a=b"]},
        {"enqueued_after": "1h"},
        {"sequences": ["1"]},
        {"body_contains": "x"},
        {"body_regex": "x"},
        {"where": "1=1"},
        {"older_than": "1d"},
    ):
        assert not build_selection(**options).is_empty, options


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5", 5),
        ("-2.5", -2.5),
        ("true", True),
        ("FALSE", False),
        ('"007"', "007"),
        ("007", 7),
        ("eu", "eu"),
        ("it's", "it's"),
        ("", ""),
    ],
)
def test_where_parameter_values_are_typed_like_set_property(value: str, expected: Any) -> None:
    from sbdlq.selection import parse_where_parameters

    assert parse_where_parameters([f"p={value}"]) == {"@p": expected}


def test_where_parameters_select() -> None:
    sel = build_selection(where="tenant = @tenant AND n > @n", where_parameters=["tenant=eu", "@n=2"])
    assert sel.matches(msg(props={"tenant": "eu", "n": 3}))
    assert not sel.matches(msg(props={"tenant": "eu", "n": 1}))
    with pytest.raises(BadInput, match="given twice"):
        build_selection(where="a = @a", where_parameters=["a=1", "@A=2"])
    with pytest.raises(BadInput, match="64-bit"):
        build_selection(where="a = @a", where_parameters=[f"a={2**64}"])


def test_the_ui_filter_line_takes_param_too() -> None:
    from sbdlq.ui.filterline import parse_filter

    sel = parse_filter("--where 'tenant = @t' --param t=eu").compile()
    assert sel.matches(msg(props={"tenant": "eu"})) and not sel.matches(msg(props={"tenant": "us"}))


def test_a_fingerprint_takes_its_group_by_id_or_prefix() -> None:
    from sbdlq.fingerprint import fingerprint

    fid = fingerprint("OrderNotFound", "Order 1 not found in store eu-west-1").id
    same = msg(reason="OrderNotFound", description="Order 99 not found in store us-east-2")
    other = msg(reason="OrderNotFound", description="Customer 99 not found in store us-east-2")
    for given in ([fid], [fid[:4].upper()], ["0000", fid]):
        sel = build_selection(fingerprints=given)
        assert not sel.is_empty
        assert sel.matches(same) and not sel.matches(other)
    with pytest.raises(BadInput, match="invalid --fingerprint"):
        build_selection(fingerprints=["abc"])


@pytest.mark.parametrize(
    ("where", "names"),
    [
        ("tenant = eu", ("tenant", "eu")),
        ("tenant = 'eu'", ()),
        ("sys.Label = orders AND NOT (a IN (b, 'c'))", ("orders", "a", "b")),  # sys.Label: no user property
        ("x LIKE y OR EXISTS(z)", ("x", "y")),
        ("tenant = @t", ()),
    ],
)
def test_where_bare_names_are_the_properties_compared_with_a_property(where: str, names: tuple[str, ...]) -> None:
    params = ["t=eu"] if "@t" in where else []
    assert build_selection(where=where, where_parameters=params).where_bare_names == names
