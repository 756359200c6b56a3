"""Subscription rules: checking and storing them, and compiled ones kept for routing (the
evaluation itself is sbdlq.sqlfilter.subscription's, shared with the routing check)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sbdlq.paths import validate_name
from sbdlq.sqlfilter.subscription import (
    Compiled,
    compile_correlation,
    constant_filter,
    matching_actions,
    run_action,
    sql_filter,
)

from .model import Draft, Entity, Rule

_SELECT_RULES = "SELECT name, filter_type, filter, action FROM rule WHERE entity_id = ? ORDER BY id"


def check_rule(rule: Rule) -> Rule:
    """The rule, once its name, filter and action are known to compile."""
    validate_name(rule.name.lstrip("$") or "x", what="rule")
    if rule.correlation is not None:
        compile_correlation(rule.correlation)
    elif constant_filter(rule.sql or "1=1") is None:
        from sbdlq.sqlfilter import compile_filter

        compile_filter(rule.sql or "1=1")
    if rule.action:
        from sbdlq.sqlfilter import compile_action

        compile_action(rule.action)
    return rule


def _columns(r: Rule) -> tuple[str, str, str | None]:
    """A rule's filter_type, filter and action columns."""
    if r.correlation is not None:
        return "correlation", json.dumps(r.correlation), r.action
    return "sql", r.sql or "1=1", r.action


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
        sql = "INSERT INTO rule (entity_id, name, filter_type, filter, action) VALUES (?,?,?,?,?)"
        db.execute(sql, (entity_id, r.name, *_columns(r)))
    else:
        sql = "UPDATE rule SET name = ?, filter_type = ?, filter = ?, action = ? WHERE id = ?"
        db.execute(sql, (r.name, *_columns(r), rule_id))


def read_rules(db: sqlite3.Connection, entity_id: int) -> list[Rule]:
    """A subscription's rules as stored."""
    out = []
    for name, ftype, text, action in db.execute(_SELECT_RULES, (entity_id,)):
        if ftype == "correlation":
            out.append(Rule(name=name, correlation=json.loads(text), action=action))
        else:
            out.append(Rule(name=name, sql=text, action=action))
    return out


class RuleBook:
    """Compiled filters and actions, kept by their text across calls."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, str], Any] = {}

    def rules(self, db: sqlite3.Connection, sub: Entity) -> list[Compiled]:
        """A subscription's rules as (name, filter, action)."""
        return [
            (name, self._filter(ftype, text), self._action(action) if action else None)
            for name, ftype, text, action in db.execute(_SELECT_RULES, (sub.id,))
        ]

    def _filter(self, ftype: str, text: str) -> Any:
        key = (ftype, text)
        if key not in self._compiled:
            self._compiled[key] = compile_correlation(json.loads(text)) if ftype == "correlation" else sql_filter(text)
        return self._compiled[key]

    def _action(self, action: str) -> Any:
        key = ("action", action)
        if key not in self._compiled:
            from sbdlq.sqlfilter import compile_action

            self._compiled[key] = compile_action(action)
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
