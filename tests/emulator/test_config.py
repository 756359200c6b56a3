"""Config.json loader: Microsoft's emulator format (JSONC), every validation error, idempotent apply."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sbdlq.addresses import parse_address
from sbdlq.emulator.config_json import apply_config, load_config, parse_config, strip_jsonc
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.errors import BadInput, ExitStatus
from sbdlq.models import OutboundMessage

EXAMPLE = Path("/work/shared/reference/emulator-config.example.jsonc")
NS = "UserConfig.Namespaces[0]"


def doc(queues: list[Any] | None = None, topics: list[Any] | None = None, name: Any = "sbemulatorns") -> str:
    """A Config.json text with one namespace."""
    ns: dict[str, Any] = {"Name": name}
    if queues is not None:
        ns["Queues"] = queues
    if topics is not None:
        ns["Topics"] = topics
    return json.dumps({"UserConfig": {"Namespaces": [ns]}}, indent=2)


def q(name: str, **props: Any) -> dict[str, Any]:
    return {"Name": name, "Properties": props}


def topic(name: str, *subs: dict[str, Any], **props: Any) -> dict[str, Any]:
    return {"Name": name, "Properties": props, "Subscriptions": list(subs)}


def sub(name: str, *rules: dict[str, Any], **props: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"Name": name, "Properties": props}
    if rules:
        out["Rules"] = list(rules)
    return out


def rule(name: str, **props: Any) -> dict[str, Any]:
    return {"Name": name, "Properties": props}


SUB0 = f"{NS}.Topics[0].Subscriptions[0]"

# (id, Config.json text, the one line of the BadInput)
ERRORS = [
    (
        "invalid duration",
        doc([q("a"), q("b"), q("c", LockDuration="PT1X")]),
        f"Config.json: {NS}.Queues[2].Properties.LockDuration: invalid duration 'PT1X' "
        "(ISO 8601, e.g. PT30S, PT5M, P14D)",
    ),
    (
        "duration that is not ISO 8601",
        doc([q("a", DefaultMessageTimeToLive="5m")]),
        f"Config.json: {NS}.Queues[0].Properties.DefaultMessageTimeToLive: invalid duration '5m' "
        "(ISO 8601, e.g. PT30S, PT5M, P14D)",
    ),
    (
        "zero duration",
        doc([q("a", DuplicateDetectionHistoryTimeWindow="PT0S")]),
        f"Config.json: {NS}.Queues[0].Properties.DuplicateDetectionHistoryTimeWindow: duration must be positive, "
        "got 'PT0S'",
    ),
    (
        "boolean as a string",
        doc([q("a", RequiresSession="true")]),
        f'Config.json: {NS}.Queues[0].Properties.RequiresSession: expected true or false, got string "true"',
    ),
    (
        "integer as a string",
        doc([q("a", MaxDeliveryCount="3")]),
        f'Config.json: {NS}.Queues[0].Properties.MaxDeliveryCount: expected an integer, got string "3"',
    ),
    (
        "integer as a float",
        doc([q("a", MaxSizeInMessages=2.5)]),
        f"Config.json: {NS}.Queues[0].Properties.MaxSizeInMessages: expected an integer, got number 2.5",
    ),
    (
        "max delivery count zero",
        doc([q("a", MaxDeliveryCount=0)]),
        f"Config.json: {NS}.Queues[0].Properties.MaxDeliveryCount: must be at least 1, got 0",
    ),
    (
        "unknown status",
        doc([q("a", Status="Paused")]),
        f"Config.json: {NS}.Queues[0].Properties.Status: invalid status 'Paused' (Active or Disabled)",
    ),
    (
        "property in the wrong case",
        doc([q("a", lockDuration="PT1M")]),
        f"Config.json: {NS}.Queues[0].Properties.lockDuration: unknown queue property; did you mean 'LockDuration'?",
    ),
    (
        "property a topic does not take",
        doc(topics=[topic("t", LockDuration="PT1M")]),
        f"Config.json: {NS}.Topics[0].Properties.LockDuration: unknown topic property (known: "
        "DefaultMessageTimeToLive, DuplicateDetectionHistoryTimeWindow, RequiresDuplicateDetection, Status, "
        "MaxMessageSizeInKilobytes)",
    ),
    (
        "bad queue name",
        doc([q("bad name!")]),
        f"Config.json: {NS}.Queues[0].Name: invalid queue name 'bad name!' (letters, digits, '.', '-', '_', '/')",
    ),
    (
        "queue name that is a subscription path",
        doc([q("t/Subscriptions/s")]),
        f"Config.json: {NS}.Queues[0].Name: invalid queue name 't/Subscriptions/s' "
        "(letters, digits, '.', '-', '_', '/')",
    ),
    (
        "bad subscription name",
        doc(topics=[topic("t", sub("a/b"))]),
        f"Config.json: {SUB0}.Name: invalid subscription name 'a/b' (letters, digits, '.', '-', '_', '/')",
    ),
    (
        "bad namespace name",
        doc(name="-ns-"),
        f"Config.json: {NS}.Name: invalid namespace name '-ns-' (letters, digits, '.', '-', '_', '/')",
    ),
    (
        "name of the wrong type",
        doc([{"Name": 7}]),
        f"Config.json: {NS}.Queues[0].Name: expected a string, got number 7",
    ),
    (
        "duplicate queue names differ only in case",
        doc([q("orders"), q("Orders")]),
        f"Config.json: {NS}.Queues[1].Name: duplicate name 'Orders' (also at {NS}.Queues[0].Name)",
    ),
    (
        "queue and topic with one name",
        doc([q("orders")], [topic("orders")]),
        f"Config.json: {NS}.Topics[0].Name: duplicate name 'orders' (also at {NS}.Queues[0].Name)",
    ),
    (
        "duplicate subscriptions",
        doc(topics=[topic("t", sub("s"), sub("s"))]),
        f"Config.json: {NS}.Topics[0].Subscriptions[1].Name: duplicate name 's' (also at {SUB0}.Name)",
    ),
    (
        "duplicate rules",
        doc(
            topics=[
                topic(
                    "t",
                    sub(
                        "s",
                        rule("r", FilterType="Sql", SqlFilter={"SqlExpression": "1=1"}),
                        rule("R", FilterType="Sql", SqlFilter={"SqlExpression": "1=1"}),
                    ),
                )
            ]
        ),
        f"Config.json: {SUB0}.Rules[1].Name: duplicate name 'R' (also at {SUB0}.Rules[0].Name)",
    ),
    (
        "unknown filter type",
        doc(topics=[topic("t", sub("s", rule("r", FilterType="Bool")))]),
        f"Config.json: {SUB0}.Rules[0].Properties.FilterType: unknown filter type 'Bool' (Correlation or Sql)",
    ),
    (
        "sql rule without its filter",
        doc(topics=[topic("t", sub("s", rule("r", FilterType="Sql")))]),
        f"Config.json: {SUB0}.Rules[0].Properties.SqlFilter: missing (FilterType Sql needs SqlFilter.SqlExpression)",
    ),
    (
        "sql filter that does not parse",
        doc(topics=[topic("t", sub("s", rule("r", FilterType="Sql", SqlFilter={"SqlExpression": "a = = 1"})))]),
        f"Config.json: {SUB0}.Rules[0].Properties.SqlFilter.SqlExpression: syntax error at position 5: unexpected '='",
    ),
    (
        "action that does not parse",
        doc(
            topics=[
                topic(
                    "t",
                    sub(
                        "s",
                        rule(
                            "r", FilterType="Sql", SqlFilter={"SqlExpression": "1=1"}, Action={"SqlExpression": "SET"}
                        ),
                    ),
                )
            ]
        ),
        f"Config.json: {SUB0}.Rules[0].Properties.Action.SqlExpression: syntax error at position 4: "
        "unexpected end of expression (expected a property name)",
    ),
    (
        "empty correlation filter",
        doc(topics=[topic("t", sub("s", rule("r", FilterType="Correlation", CorrelationFilter={})))]),
        f"Config.json: {SUB0}.Rules[0].Properties.CorrelationFilter: empty: name at least one property to match",
    ),
    (
        "correlation property of the wrong type",
        doc(
            topics=[
                topic(
                    "t",
                    sub("s", rule("r", FilterType="Correlation", CorrelationFilter={"Properties": {"tenant": ["a"]}})),
                )
            ]
        ),
        f"Config.json: {SUB0}.Rules[0].Properties.CorrelationFilter.Properties.tenant: "
        "expected a string, number or boolean, got an array",
    ),
    (
        "unknown correlation key",
        doc(topics=[topic("t", sub("s", rule("r", FilterType="Correlation", CorrelationFilter={"label": "x"})))]),
        f"Config.json: {SUB0}.Rules[0].Properties.CorrelationFilter.label: unknown key; did you mean 'Label'?",
    ),
    (
        "forwarding to itself",
        doc([q("a", ForwardTo="a")]),
        f"Config.json: {NS}.Queues[0].Properties.ForwardTo: 'a' cannot forward to itself",
    ),
    (
        "queues not an array",
        doc({}),  # type: ignore[arg-type]
        f"Config.json: {NS}.Queues: expected an array, got an object",
    ),
    (
        "two namespaces",
        json.dumps({"UserConfig": {"Namespaces": [{"Name": "a"}, {"Name": "b"}]}}),
        "Config.json: UserConfig.Namespaces: expected exactly one namespace, got 2",
    ),
    (
        "message size over Premium's",
        doc([q("a", MaxMessageSizeInKilobytes=102401)]),
        f"Config.json: {NS}.Queues[0].Properties.MaxMessageSizeInKilobytes: must be between 1 and 102400 KB "
        "(256 is Standard's, 102400 Premium's most), got 102401",
    ),
    (
        "message size not an integer",
        doc([], [topic("t", MaxMessageSizeInKilobytes="256")]),
        f"Config.json: {NS}.Topics[0].Properties.MaxMessageSizeInKilobytes: expected an integer number of "
        'kilobytes, got string "256"',
    ),
    (
        "namespace message size zero",
        json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns", "MaxMessageSizeInKilobytes": 0}]}}),
        f"Config.json: {NS}.MaxMessageSizeInKilobytes: must be between 1 and 102400 KB "
        "(256 is Standard's, 102400 Premium's most), got 0",
    ),
    (
        "message size on a subscription",
        doc([], [topic("t", sub("s", MaxMessageSizeInKilobytes=512))]),
        f"Config.json: {SUB0}.Properties.MaxMessageSizeInKilobytes: unknown subscription property (known: "
        "DeadLetteringOnMessageExpiration, DefaultMessageTimeToLive, ForwardDeadLetteredMessagesTo, ForwardTo, "
        "LockDuration, MaxDeliveryCount, RequiresSession, DeadLetteringOnFilterEvaluationExceptions, Status)",
    ),
    ("no UserConfig", "{}", "Config.json: UserConfig: missing"),
    ("no Namespaces", '{"UserConfig": {}}', "Config.json: UserConfig.Namespaces: missing"),
    (
        "top level is an array",
        "[]",
        "Config.json: expected an object with UserConfig at the top level, got an array",
    ),
    (
        "unknown key",
        '{"UserConfig": {"Namespaces": [{"Name": "ns", "Queue": []}]}}',
        f"Config.json: {NS}.Queue: unknown key (known: Name, Queues, Topics, MaxMessageSizeInKilobytes)",
    ),
    (
        "invalid JSON with line and column",
        '{\n  "UserConfig": {\n    "Namespaces": []\n    "Logging": {}\n  }\n}',
        "Config.json:4:5: invalid JSON: Expecting ',' delimiter",
    ),
    (
        "unterminated block comment",
        '{\n  /* no end\n  "UserConfig": {}\n}',
        "Config.json:2:3: invalid JSON: unterminated /* comment",
    ),
]


@pytest.mark.parametrize(("text", "line"), [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS])
def test_invalid_config_is_one_line_naming_the_field(text: str, line: str) -> None:
    with pytest.raises(BadInput) as info:
        parse_config(text)
    assert info.value.line() == line
    assert info.value.exit_status is ExitStatus.USAGE
    assert "\n" not in info.value.line()


def test_comments_and_trailing_commas_but_not_inside_strings(engine: Engine) -> None:
    text = """
    // a comment before everything
    {
      "UserConfig": {
        /* block comment
           over lines */
        "Namespaces": [
          {
            "Name": "my-namespace",   // any name, not only sbemulatorns
            "Topics": [
              {
                "Name": "t",
                "Subscriptions": [
                  {
                    "Name": "s",
                    "Rules": [
                      {
                        "Name": "url",
                        "Properties": {
                          "FilterType": "Sql",
                          "SqlFilter": { "SqlExpression": "url = 'http://x/*y*/' OR note = 'a // b, ]'" },
                        },
                      },
                      {
                        "Name": "quote",
                        "Properties": {
                          "FilterType": "Correlation",
                          "CorrelationFilter": { "Label": "say \\"/* hi */\\" // there", },
                        },
                      },
                    ],
                  },
                ],
              },
            ],
          },
        ],
      },
    }
    """
    cfg = parse_config(text)
    assert cfg.namespace == "my-namespace"
    apply_config(engine, cfg)
    assert engine.rules("t/Subscriptions/s") == [
        Rule("url", sql="url = 'http://x/*y*/' OR note = 'a // b, ]'"),
        Rule("quote", correlation={"Label": 'say "/* hi */" // there'}),
    ]


def test_strip_keeps_lines_and_columns() -> None:
    text = '{"a": 1, // c\n /* x\n y */ "b": [1, 2,],}'
    stripped = strip_jsonc(text)
    assert len(stripped) == len(text)
    assert stripped.count("\n") == text.count("\n")
    assert json.loads(stripped) == {"a": 1, "b": [1, 2]}


def test_the_official_example_creates_exactly_its_entities_and_rules(engine: Engine) -> None:
    cfg = load_config(EXAMPLE)
    applied = apply_config(engine, cfg)
    paths = [f"topic.1/Subscriptions/subscription.{i}" for i in range(1, 5)]
    assert [(a.kind, a.path, a.created, a.rules) for a in applied] == [
        ("queue", "queue.1", True, 0),
        ("topic", "topic.1", True, 0),
        *[("subscription", p, True, 1) for p in paths],
    ]
    assert [(e.path, e.kind) for e in engine.list_entities()] == [
        ("queue.1", "queue"),
        ("topic.1", "topic"),
        *[(p, "subscription") for p in paths],
    ]
    queue = engine.get_entity("queue.1")
    assert (queue.max_delivery_count, queue.lock_duration_s, queue.default_ttl_s) == (3, 60.0, 3600.0)
    assert (queue.dead_lettering_on_expiration, queue.requires_session, queue.forward_to) == (False, False, None)
    assert engine.get_entity("topic.1").subscription_count == 4
    assert [engine.rules(p) for p in paths] == [
        [Rule("app-prop-filter-1", correlation={"ContentType": "application/json"})],
        [Rule("user-prop-filter-1", correlation={"Properties": {"prop1": "value1"}})],
        [Rule.true()],
        [
            Rule(
                "sql-filter-1",
                sql="sys.MessageId = '123456' AND userProp1 = 'value1'",
                action="SET sys.To = 'Entity'",
            )
        ],
    ]


def test_rules_route_messages_as_configured(engine: Engine) -> None:
    apply_config(engine, load_config(EXAMPLE))
    engine.send(
        "topic.1",
        [
            OutboundMessage(body=b"1", message_id="json", content_type="application/json"),
            OutboundMessage(body=b"2", message_id="prop", application_properties={"prop1": "value1"}),
            OutboundMessage(body=b"3", message_id="123456", application_properties={"userProp1": "value1"}),
        ],
    )
    got = {
        i: [m.message_id for m in engine.peek(parse_address(f"topic.1/Subscriptions/subscription.{i}"), 0, 10)]
        for i in range(1, 5)
    }
    assert got == {1: ["json"], 2: ["prop"], 3: ["json", "prop", "123456"], 4: ["123456"]}
    (m,) = engine.peek(parse_address("topic.1/Subscriptions/subscription.4"), 0, 10)
    assert m.to == "Entity"  # the rule's action ran


def test_reload_is_idempotent_and_keeps_messages(engine: Engine) -> None:
    cfg = load_config(EXAMPLE)
    apply_config(engine, cfg)
    engine.send("queue.1", [OutboundMessage(body=b"x", message_id=f"m{i}") for i in range(5)])
    engine.send("topic.1", [OutboundMessage(body=b"y", content_type="application/json")])
    address = parse_address("queue.1")
    (locked,) = engine.receive(address, 1)
    assert locked.lock_token is not None
    engine.dead_letter(address, [locked.lock_token], "Broken", "keep me")
    before = {e.path: engine.counts(e.path) for e in engine.list_entities() if e.kind != "topic"}

    again = apply_config(engine, load_config(EXAMPLE))

    assert [a.created for a in again] == [False] * 6
    after = {e.path: engine.counts(e.path) for e in engine.list_entities() if e.kind != "topic"}
    assert after == before
    assert before["queue.1"].active == 4 and before["queue.1"].dead_letter == 1
    assert before["topic.1/Subscriptions/subscription.1"].active == 1


def test_reload_updates_properties_and_replaces_rules(engine: Engine) -> None:
    old_rule = rule("old", FilterType="Sql", SqlFilter={"SqlExpression": "x = 1"})
    apply_config(engine, parse_config(doc([q("a", MaxDeliveryCount=3)], [topic("t", sub("s", old_rule))])))
    engine.send("a", [OutboundMessage(body=b"kept")])
    new = doc(
        [q("a", MaxDeliveryCount=5, LockDuration="PT30S")],
        [topic("t", sub("s", rule("new", FilterType="Correlation", CorrelationFilter={"Label": "y"})))],
    )
    applied = apply_config(engine, parse_config(new))
    assert [(a.path, a.created) for a in applied] == [("a", False), ("t", False), ("t/Subscriptions/s", False)]
    a = engine.get_entity("a")
    assert (a.max_delivery_count, a.lock_duration_s) == (5, 30.0)
    assert engine.rules("t/Subscriptions/s") == [Rule("new", correlation={"Label": "y"})]
    assert engine.counts("a").active == 1


def test_our_extensions(engine: Engine) -> None:
    text = doc(
        [
            q("full", MaxSizeInMessages=2, Status="disabled"),
            q("fwd", ForwardTo="full", ForwardDeadLetteredMessagesTo="t"),
        ],
        [topic("t", sub("s", DeadLetteringOnFilterEvaluationExceptions=False, RequiresSession=True))],
    )
    apply_config(engine, parse_config(text))
    full, fwd, s = engine.get_entity("full"), engine.get_entity("fwd"), engine.get_entity("t/Subscriptions/s")
    assert full.status == "Disabled"
    assert (fwd.forward_to, fwd.forward_dead_lettered_to) == ("full", "t")
    assert (s.dead_lettering_on_filter_exceptions, s.requires_session) == (False, True)


def test_max_message_size_per_namespace_and_entity(engine: Engine) -> None:
    """The namespace's MaxMessageSizeInKilobytes is its queues' and topics' default; an entity's wins."""
    data = json.loads(doc([q("plain"), q("big", MaxMessageSizeInKilobytes=102400)], [topic("t", sub("s"))]))
    data["UserConfig"]["Namespaces"][0]["MaxMessageSizeInKilobytes"] = 1024
    apply_config(engine, parse_config(json.dumps(data)))
    sizes = {p: engine.max_message_bytes(p) for p in ("plain", "big", "t", "t/Subscriptions/s")}
    assert sizes == {"plain": 1024 * 1024, "big": 102400 * 1024, "t": 1024 * 1024, "t/Subscriptions/s": 1024 * 1024}
    apply_config(engine, parse_config(doc([q("plain")])))  # dropped from the file: back to Standard's 256 KB
    assert engine.max_message_bytes("plain") == 256 * 1024


def test_nothing_is_written_when_forwarding_names_an_unknown_entity(engine: Engine) -> None:
    cfg = parse_config(doc([q("a"), q("b", ForwardTo="nowhere")]))
    with pytest.raises(BadInput) as info:
        apply_config(engine, cfg)
    assert info.value.line() == (
        f"Config.json: {NS}.Queues[1].Properties.ForwardTo: 'nowhere' is not a queue or topic in the file or the store"
    )
    assert engine.list_entities() == []


def test_forwarding_may_name_an_entity_already_in_the_store(engine: Engine) -> None:
    engine.create_queue("existing")
    apply_config(engine, parse_config(doc([q("a", ForwardTo="existing")])))
    assert engine.get_entity("a").forward_to == "existing"


def test_nothing_is_written_when_a_name_is_taken_by_another_kind(engine: Engine) -> None:
    engine.create_queue("events")
    cfg = parse_config(doc([q("first")], [topic("events", sub("s"))]))
    with pytest.raises(BadInput) as info:
        apply_config(engine, cfg)
    assert info.value.line() == f"Config.json: {NS}.Topics[0].Name: 'events' already exists in the store as a queue"
    assert [e.path for e in engine.list_entities()] == ["events"]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as info:
        load_config(tmp_path / "Config.json")
    assert info.value.line() == f"{tmp_path / 'Config.json'}: no such file"


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as info:
        load_config(tmp_path)
    assert info.value.line() == f"{tmp_path}: is a directory, not a Config.json file"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "Config.json"
    path.write_text("{}")
    path.chmod(0)
    with pytest.raises(BadInput) as info:
        load_config(path)
    assert info.value.line() == f"{path}: cannot read: Permission denied"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "Config.json"
    path.write_bytes(b'{"UserConfig": "\xff"}')
    with pytest.raises(BadInput) as info:
        load_config(path)
    assert info.value.line() == f"{path}: not UTF-8 text (byte 16)"


def test_errors_name_the_file_as_given(tmp_path: Path) -> None:
    path = tmp_path / "sb.jsonc"
    path.write_text("\ufeff" + doc([q("a", LockDuration="soon")]))  # a BOM is fine
    with pytest.raises(BadInput) as info:
        load_config(path)
    assert info.value.line() == (
        f"{path}: {NS}.Queues[0].Properties.LockDuration: invalid duration 'soon' (ISO 8601, e.g. PT30S, PT5M, P14D)"
    )
