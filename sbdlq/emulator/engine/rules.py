"""Subscription rules: checking, storing, compiling and applying filters and actions."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from sbdlq.emulator.props import dump_props, load_props
from sbdlq.errors import BadInput
from sbdlq.paths import validate_name

from .errors import BadCorrelationFilter
from .model import FALSE_SQL, TRUE_SQL, Draft, Entity, Rule

# Correlation filter keys as the service, Microsoft's Config.json and the admin SDK spell
# them, compared without case or underscores; the value names the SQL system property.
_CORRELATION_KEYS = {
    "contenttype": "ContentType",
    "correlationid": "CorrelationId",
    "label": "Label",
    "subject": "Label",
    "messageid": "MessageId",
    "replyto": "ReplyTo",
    "replytosessionid": "ReplyToSessionId",
    "sessionid": "SessionId",
    "to": "To",
}
_CORRELATION_PROPS = {"properties", "applicationproperties", "userproperties"}
_SELECT_RULES = (
    "SELECT name, filter_type, filter, action, parameters, action_parameters FROM rule WHERE entity_id = ? ORDER BY id"
)
#: filter_type of the service's TrueFilter and FalseFilter (their texts are 1=1 and 1=0)
_CONSTANT_TYPES = {"true": True, "false": False}

#: A compiled rule: name, filter (True, False, Correlation or SqlFilter) and action (or None).
Compiled = tuple[str, Any, Any]


class RuleError(Exception):
    """A filter or action failed on a message: what the subscription's DLQ records."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message

    @staticmethod
    def of(exc: Exception) -> RuleError:
        """The service's view of an evaluation failure: the exception's type name and message."""
        type_name = getattr(exc, "type_name", None) or type(exc).__name__
        message = getattr(exc, "message", None) or str(exc)
        return RuleError(str(type_name), str(message))


@dataclass(frozen=True, slots=True)
class Correlation:
    """A compiled correlation filter: every named value must equal the message's."""

    system: tuple[tuple[str, Any], ...]
    props: tuple[tuple[str, Any], ...]

    def matches(self, system: dict[str, Any], props: dict[str, Any]) -> bool:
        for name, expected in self.system:
            if system.get(name) != expected:
                return False
        return all(key in props and props[key] == expected for key, expected in self.props)


def compile_correlation(flt: dict[str, Any]) -> Correlation:
    """Check and compile a correlation filter; null values are not part of the match."""
    if not isinstance(flt, dict):
        raise BadCorrelationFilter.not_an_object()
    system: list[tuple[str, Any]] = []
    props: list[tuple[str, Any]] = []
    for key, value in flt.items():
        norm = str(key).replace("_", "").lower()
        if norm in _CORRELATION_PROPS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise BadCorrelationFilter.properties_not_an_object(key)
            props.extend((str(k), v) for k, v in value.items() if v is not None)
        elif norm in _CORRELATION_KEYS:
            if value is not None:
                system.append((_CORRELATION_KEYS[norm], value))
        else:
            raise BadCorrelationFilter.unknown_key(key)
    return Correlation(tuple(system), tuple(props))


def constant_filter(sql: str) -> bool | None:
    """True or False for the service's TrueFilter / FalseFilter texts, else None.

    The default rule of every subscription is `1=1`: recognising it spares the SQL
    evaluator on each fan-out (and the emulator the import).
    """
    text = "".join(sql.split()).lower()
    if text in ("1=1", "true"):
        return True
    if text in ("1=0", "false"):
        return False
    return None


def check_rule(rule: Rule) -> Rule:
    """The rule, once its name, filter and action are known to compile (with their parameters)."""
    validate_name(rule.name.lstrip("$") or "x", what="rule")
    if rule.correlation is not None:
        if rule.parameters:
            raise BadInput("a correlation filter takes no parameters")
        compile_correlation(rule.correlation)
    elif rule.constant is not None:
        if rule.parameters:
            raise BadInput("a TrueFilter or FalseFilter takes no parameters")
        rule.sql = TRUE_SQL if rule.constant else FALSE_SQL
    elif constant_filter(rule.sql or TRUE_SQL) is None or rule.parameters:
        from sbdlq.sqlfilter import compile_filter

        compile_filter(rule.sql or TRUE_SQL, rule.parameters)
    if rule.action:
        from sbdlq.sqlfilter import compile_action

        compile_action(rule.action, rule.action_parameters)
    elif rule.action_parameters:
        raise BadInput("action parameters need a SQL action")
    return rule


def _columns(r: Rule) -> tuple[str, str, str | None, str | None, str | None]:
    """A rule's filter_type, filter, action, parameters and action_parameters columns."""
    params, action_params = dump_props(r.parameters or {}), dump_props(r.action_parameters or {})
    if r.correlation is not None:
        return "correlation", json.dumps(r.correlation), r.action, params, action_params
    if r.constant is not None:
        return ("true" if r.constant else "false"), r.sql or TRUE_SQL, r.action, params, action_params
    return "sql", r.sql or TRUE_SQL, r.action, params, action_params


def store_rules(db: sqlite3.Connection, entity_id: int, rules: list[Rule]) -> None:
    """Replace a subscription's rules."""
    db.execute("DELETE FROM rule WHERE entity_id = ?", (entity_id,))
    for r in rules:
        put_rule(db, entity_id, r)


def find_rule_id(db: sqlite3.Connection, entity_id: int, name: str) -> int | None:
    """The row id of the subscription's rule of that name (names compare without case), or None."""
    for rule_id, held in db.execute("SELECT id, name FROM rule WHERE entity_id = ?", (entity_id,)):
        if str(held).casefold() == name.casefold():
            return int(rule_id)
    return None


def put_rule(db: sqlite3.Connection, entity_id: int, r: Rule, rule_id: int | None = None) -> None:
    """Insert a rule after the others, or replace the one at rule_id in place (keeping its order)."""
    if rule_id is None:
        sql = (
            "INSERT INTO rule (entity_id, name, filter_type, filter, action, parameters, action_parameters)"
            " VALUES (?,?,?,?,?,?,?)"
        )
        db.execute(sql, (entity_id, r.name, *_columns(r)))
    else:
        sql = (
            "UPDATE rule SET name = ?, filter_type = ?, filter = ?, action = ?, parameters = ?,"
            " action_parameters = ? WHERE id = ?"
        )
        db.execute(sql, (r.name, *_columns(r), rule_id))


def read_rules(db: sqlite3.Connection, entity_id: int) -> list[Rule]:
    """A subscription's rules as stored."""
    out = []
    for name, ftype, text, action, params, action_params in db.execute(_SELECT_RULES, (entity_id,)):
        rule = Rule(name=name, action=action, parameters=load_props(params) or None)
        rule.action_parameters = load_props(action_params) or None
        if ftype == "correlation":
            rule.correlation = json.loads(text)
        else:
            rule.sql, rule.constant = text, _CONSTANT_TYPES.get(ftype)
        out.append(rule)
    return out


class RuleBook:
    """Compiled filters and actions, kept by their text (and parameters) across calls."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, str, str | None], Any] = {}

    def rules(self, db: sqlite3.Connection, sub: Entity) -> list[Compiled]:
        """A subscription's rules as (name, filter, action)."""
        return [
            (name, self._filter(ftype, text, params), self._action(action, action_params) if action else None)
            for name, ftype, text, action, params, action_params in db.execute(_SELECT_RULES, (sub.id,))
        ]

    def _filter(self, ftype: str, text: str, params: str | None) -> Any:
        if ftype in _CONSTANT_TYPES:
            return _CONSTANT_TYPES[ftype]
        key = (ftype, text, params)
        if key not in self._compiled:
            if ftype == "correlation":
                self._compiled[key] = compile_correlation(json.loads(text))
            else:
                self._compiled[key] = sql_filter(text, load_props(params))
        return self._compiled[key]

    def _action(self, action: str, params: str | None) -> Any:
        key = ("action", action, params)
        if key not in self._compiled:
            from sbdlq.sqlfilter import compile_action

            self._compiled[key] = compile_action(action, load_props(params))
        return self._compiled[key]


def sql_filter(text: str, parameters: dict[str, Any] | None = None) -> Any:
    """A SQL filter compiled: True or False for the constant ones, else a SqlFilter."""
    constant = None if parameters else constant_filter(text)
    if constant is not None:
        return constant
    from sbdlq.sqlfilter import compile_filter

    return compile_filter(text, parameters)


def compile_rule(rule: Any) -> Compiled:
    """Any rule with `name`, `sql`, `correlation` and `action` (the engine's, or one a backend read),
    and optionally `parameters`, `action_parameters` and `constant`."""
    from sbdlq.sqlfilter import compile_action

    constant = getattr(rule, "constant", None)
    flt: Any
    if rule.correlation is not None:
        flt = compile_correlation(rule.correlation)
    elif constant is not None:
        flt = bool(constant)
    else:
        flt = sql_filter(rule.sql or TRUE_SQL, getattr(rule, "parameters", None))
    action = compile_action(rule.action, getattr(rule, "action_parameters", None)) if rule.action else None
    return (rule.name, flt, action)


def apply_rules(rules: list[Compiled], d: Draft) -> Draft | None:
    """The copy a subscription receives, or None when no rule matches; RuleError on failure.

    Rules are OR-ed into one copy; the actions of every matching rule apply to it in order.
    """
    copy: Draft | None = None
    system: dict[str, Any] | None = None
    for _name, flt, act in rules:
        if flt is True:
            matched = True
        elif flt is False:
            matched = False
        else:
            if system is None:
                system = d.system()
            try:
                matched = flt.matches(system, d.props)
            except Exception as exc:
                raise RuleError.of(exc) from None
        if not matched:
            continue
        if copy is None:
            copy = d.copy()
        if act is not None:
            sys_now = copy.system()
            try:
                act.apply(sys_now, copy.props)
            except Exception as exc:
                raise RuleError.of(exc) from None
            copy.take_system(sys_now)
    return copy
