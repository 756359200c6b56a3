"""Compiled filters and actions: parse once, then evaluate per message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbdlq.sqlfilter.errors import FilterEvaluationError
from sbdlq.sqlfilter.evaluator import Eval, Exec, compile_node, compile_statement
from sbdlq.sqlfilter.parser import parse_action, parse_filter

# Python errors a strange property value could still provoke; reported like the broker's.
_FOREIGN = (TypeError, ValueError, ArithmeticError)


class SqlFilter:
    """A compiled SQL filter; `matches` is TRUE-only (FALSE and unknown don't match)."""

    __slots__ = ("_eval", "expression")

    def __init__(self, expression: str, evaluate: Eval) -> None:
        self.expression = expression
        self._eval = evaluate

    def matches(self, system: Mapping[str, Any], properties: Mapping[str, Any]) -> bool:
        """Whether the message with these system and application properties is selected."""
        try:
            return self._eval(system, properties) is True
        except FilterEvaluationError:
            raise
        except _FOREIGN as exc:
            raise FilterEvaluationError("FilterException", str(exc)) from exc

    def __repr__(self) -> str:
        return f"SqlFilter({self.expression!r})"


class SqlAction:
    """A compiled SQL rule action (`SET ...; REMOVE ...`)."""

    __slots__ = ("_statements", "expression")

    def __init__(self, expression: str, statements: list[Exec]) -> None:
        self.expression = expression
        self._statements = statements

    def apply(self, system: dict[str, Any], properties: dict[str, Any]) -> None:
        """Run the statements in order; all or nothing: on error neither dict changes."""
        work_sys, work_props = dict(system), dict(properties)
        try:
            for statement in self._statements:
                statement(work_sys, work_props)
        except FilterEvaluationError:
            raise
        except _FOREIGN as exc:
            raise FilterEvaluationError("FilterException", str(exc)) from exc
        _replace(system, work_sys)
        _replace(properties, work_props)

    def __repr__(self) -> str:
        return f"SqlAction({self.expression!r})"


def _replace(target: dict[str, Any], source: dict[str, Any]) -> None:
    for key in [k for k in target if k not in source]:
        del target[key]
    target.update(source)


def compile_filter(expr: str, parameters: Mapping[str, Any] | None = None) -> SqlFilter:
    """Parse and compile a SQL filter, with the values of its `@name` parameters; raises SqlFilterSyntaxError."""
    return SqlFilter(expr, compile_node(parse_filter(expr, parameters)))


def compile_action(expr: str, parameters: Mapping[str, Any] | None = None) -> SqlAction:
    """Parse and compile a SQL rule action, with the values of its `@name` parameters; raises SqlFilterSyntaxError."""
    return SqlAction(expr, [compile_statement(s) for s in parse_action(expr, parameters)])
