"""The rule operations of a subscription's `$management` node: add, remove and enumerate rules.

Bodies follow Microsoft's "AMQP 1.0 in Azure Service Bus: request-response operations"
and what the .NET rule manager (ServiceBusRuleManager) sends: `add-rule` takes `rule-name`
and a `rule-description` map (`sql-filter` or `correlation-filter`, and `sql-rule-action`);
`enumerate-rules` answers with described lists whose codes are the .NET client's
(AmqpRuleDescriptionCodec and friends; note that the filter codes have one zero fewer).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from proton import Described, ulong

from sbdlq.addresses import Address
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.emulator.engine.vocabulary import FALSE_SQL, TRUE_SQL
from sbdlq.errors import BadInput

from .operation_tables import Operation, Outcome, paging, required_text
from .plain_values import as_text, to_amqp, to_plain, to_timestamp

ADD_RULE = "com.microsoft:add-rule"
REMOVE_RULE = "com.microsoft:remove-rule"
ENUMERATE_RULES = "com.microsoft:enumerate-rules"

RULE_DESCRIPTION_CODE = 0x0000013700000004
EMPTY_ACTION_CODE = 0x0000013700000005
SQL_ACTION_CODE = 0x0000013700000006
SQL_FILTER_CODE = 0x000001370000006
TRUE_FILTER_CODE = 0x000001370000007
FALSE_FILTER_CODE = 0x000001370000008
CORRELATION_FILTER_CODE = 0x000001370000009

# The correlation filter's map keys on the wire, in the order of its described list,
# with the names the engine's rules (and Config.json) use.
CORRELATION_FIELDS = (
    ("correlation-id", "CorrelationId"),
    ("message-id", "MessageId"),
    ("to", "To"),
    ("reply-to", "ReplyTo"),
    ("label", "Label"),
    ("session-id", "SessionId"),
    ("reply-to-session-id", "ReplyToSessionId"),
    ("content-type", "ContentType"),
)


def _rule_name(body: dict[str, Any]) -> str:
    return required_text(body, "rule-name")


def _sql_map(value: Any, what: str) -> tuple[str, dict[str, Any] | None]:
    """The `expression` of a sql-filter or sql-rule-action map, and its `parameters` (an sbdlq
    extension: the values of the expression's `@name`s, as the admin API's SqlFilter carries them)."""
    if not isinstance(value, dict):
        raise BadInput(f"{what} must be a map with an expression")
    given = {str(k): v for k, v in value.items()}
    text = as_text(given.get("expression"))
    if not text:
        raise BadInput(f"{what} needs an expression")
    raw = given.get("parameters")
    if raw is not None and not isinstance(raw, dict):
        raise BadInput(f"{what} parameters must be a map")
    parameters = {str(k): to_plain(v) for k, v in raw.items()} if raw else None
    return text, parameters


def rule_from_description(name: str, description: Any) -> Rule:
    """The engine's rule for an add-rule `rule-description` map.

    The SDKs send a TrueRuleFilter and a FalseRuleFilter as a sql-filter of 1=1 and 1=0 (this
    map has no other way to say them): those texts become the service's TrueFilter and
    FalseFilter, so enumerate-rules hands them back with their types.
    """
    if not isinstance(description, dict):
        raise BadInput("rule-description must be a map")
    desc = {str(k): v for k, v in description.items()}
    raw_action = desc.get("sql-rule-action")
    action, action_parameters = (None, None) if raw_action is None else _sql_map(raw_action, "sql-rule-action")
    correlation = desc.get("correlation-filter")
    if correlation is not None:
        if desc.get("sql-filter") is not None:
            raise BadInput("a rule has a sql-filter or a correlation-filter, not both")
        rule = Rule(name=name, correlation=_correlation(correlation))
    else:
        raw_sql = desc.get("sql-filter")
        sql, parameters = (TRUE_SQL, None) if raw_sql is None else _sql_map(raw_sql, "sql-filter")
        constant = {TRUE_SQL: True, FALSE_SQL: False}.get("".join(sql.split()))
        if constant is not None and not parameters:
            rule = Rule.true(name) if constant else Rule.false(name)
        else:
            rule = Rule(name=name, sql=sql, parameters=parameters)
    rule.action, rule.action_parameters = action, action_parameters
    return rule


def _correlation(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadInput("correlation-filter must be a map")
    given = {str(k): v for k, v in value.items()}
    out: dict[str, Any] = {}
    for wire, name in CORRELATION_FIELDS:
        text = as_text(given.get(wire))
        if text is not None:
            out[name] = text
    props = given.get("properties")
    if props:
        out["Properties"] = {str(k): to_plain(v) for k, v in dict(props).items()}
    if not out:
        raise BadInput("correlation-filter names no property to match")
    return out


def _filter(rule: Rule) -> Described:
    if rule.correlation is not None:
        by_name = {str(k).replace("_", "").lower(): v for k, v in rule.correlation.items()}
        by_name.setdefault("label", by_name.get("subject"))
        fields: list[Any] = [by_name.get(name.lower()) for _wire, name in CORRELATION_FIELDS]
        props = by_name.get("properties") or by_name.get("applicationproperties") or by_name.get("userproperties")
        fields.append(to_amqp(dict(props or {})))
        return Described(ulong(CORRELATION_FILTER_CODE), fields)
    if rule.constant is True:
        return Described(ulong(TRUE_FILTER_CODE), [])
    if rule.constant is False:
        return Described(ulong(FALSE_FILTER_CODE), [])
    # The codec's list has no place for parameters: enumerate-rules gives the expression only.
    return Described(ulong(SQL_FILTER_CODE), [rule.sql or TRUE_SQL])


def rule_description(rule: Rule, created: datetime) -> Described:
    """A rule as `com.microsoft:rule-description:list`: filter, action, name, created-at."""
    if rule.action:
        action = Described(ulong(SQL_ACTION_CODE), [rule.action])
    else:
        action = Described(ulong(EMPTY_ACTION_CODE), [])
    return Described(ulong(RULE_DESCRIPTION_CODE), [_filter(rule), action, rule.name, to_timestamp(created)])


def _add(engine: Engine, address: Address, body: dict[str, Any], holder: str | None) -> Outcome:
    name = _rule_name(body)
    engine.add_rule(address.entity, rule_from_description(name, body.get("rule-description")))
    return 200, None


def _remove(engine: Engine, address: Address, body: dict[str, Any], holder: str | None) -> Outcome:
    engine.remove_rule(address.entity, _rule_name(body))
    return 200, None


def _enumerate(engine: Engine, address: Address, body: dict[str, Any], holder: str | None) -> Outcome:
    skip, top = paging(body)
    if skip < 0 or top < 1:
        raise BadInput("skip must be 0 or more and top 1 or more")
    if not address.entity.is_subscription:
        raise BadInput(f"{address.entity} is not a subscription: only subscriptions have rules")
    page = engine.rules(address.entity)[skip : skip + top]
    if not page:
        return 204, None
    now = datetime.now(UTC)  # the store keeps no creation time for rules
    return 200, {"rules": [{"rule-description": rule_description(r, now)} for r in page]}


RULE_OPERATIONS: dict[str, Operation] = {
    ADD_RULE: _add,
    REMOVE_RULE: _remove,
    ENUMERATE_RULES: _enumerate,
}
