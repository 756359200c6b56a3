"""Subscription rules: checking and storing them, and compiled ones kept for routing (the
evaluation itself is sbdlq.sqlfilter.subscription's, shared with the routing check)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sbdlq.addresses import validate_name
from sbdlq.emulator.property_json import dump_props, load_props
from sbdlq.errors import BadInput
from sbdlq.sqlfilter.subscription import (
    Compiled,
    compile_correlation,
    constant_filter,
    matching_actions,
    run_action,
    sql_filter,
)

from .vocabulary import FALSE_SQL, TRUE_SQL, Draft, Entity, Rule

_SELECT_RULES = (
    "SELECT name, filter_type, filter, action, parameters, action_parameters FROM rule WHERE entity_id = ? ORDER BY id"
)
#: filter_type of the service's TrueFilter and FalseFilter (their texts are 1=1 and 1=0)
_CONSTANT_TYPES = {"true": True, "false": False}


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


def apply_rules(rules: list[Compiled], d: Draft) -> Draft | None:
    """The copy a subscription receives, or None when no rule matches; RuleError on failure.

    Which rules match is sqlfilter's (the routing check predicts with the same); the actions
    apply here, each to the draft's own fields.
    """
    actions = matching_actions(rules, d.system, d.props)
    if actions is None:
        return None
    copy = d.copy()
    for act in actions:
        sys_now = copy.system()
        run_action(act, sys_now, copy.props)
        copy.take_system(sys_now)
    return copy
