"""A subscription's rules compiled and applied to a message: the one evaluation the emulator
engine routes with and the routing check (operations/routing_check.py) predicts with, on either backend.

A message is given as its system properties (`system_view`, by their SQL names) and its
application properties. Rules are OR-ed into one copy; the actions of every matching rule
apply to it in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sbdlq.sqlfilter.correlation import CORRELATION_KEYS, CORRELATION_PROPS, BadCorrelationFilter, correlation_key

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

    def matches(self, system: Mapping[str, Any], props: Mapping[str, Any]) -> bool:
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
        norm = correlation_key(key)
        if norm in CORRELATION_PROPS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise BadCorrelationFilter.properties_not_an_object(key)
            props.extend((str(k), v) for k, v in value.items() if v is not None)
        elif norm in CORRELATION_KEYS:
            if value is not None:
                system.append((CORRELATION_KEYS[norm], value))
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


def sql_filter(text: str, parameters: dict[str, Any] | None = None) -> Any:
    """A SQL filter compiled: True or False for the constant ones, else a SqlFilter."""
    constant = None if parameters else constant_filter(text)
    if constant is not None:
        return constant
    from sbdlq.sqlfilter.compiled import compile_filter

    return compile_filter(text, parameters)


def compile_rule(rule: Any) -> Compiled:
    """Any rule with `name`, `sql`, `correlation` and `action` (the engine's, or one a backend read),
    and optionally `parameters`, `action_parameters` and `constant` (a True or False filter)."""
    from sbdlq.sqlfilter.compiled import compile_action

    constant = getattr(rule, "constant", None)
    flt: Any
    if rule.correlation is not None:
        flt = compile_correlation(rule.correlation)
    elif constant is not None:
        flt = bool(constant)
    else:
        flt = sql_filter(rule.sql or "1=1", getattr(rule, "parameters", None))
    action = compile_action(rule.action, getattr(rule, "action_parameters", None)) if rule.action else None
    return (rule.name, flt, action)


def matching_actions(
    rules: Sequence[Compiled], system_of: Callable[[], dict[str, Any]], props: Mapping[str, Any]
) -> list[Any] | None:
    """The actions of the rules that match, in order (None when no rule matches); RuleError on failure.

    `system_of` is called only when a filter needs the system properties (not for `1=1`).
    """
    matched = False
    actions: list[Any] = []
    system: dict[str, Any] | None = None
    for _name, flt, act in rules:
        if flt is True:
            hit = True
        elif flt is False:
            hit = False
        else:
            if system is None:
                system = system_of()
            try:
                hit = flt.matches(system, props)
            except Exception as exc:
                raise RuleError.of(exc) from None
        if hit:
            matched = True
            if act is not None:
                actions.append(act)
    return actions if matched else None


def run_action(action: Any, system: dict[str, Any], props: dict[str, Any]) -> None:
    """Apply one rule action to the copy's properties (all or nothing); RuleError on failure."""
    try:
        action.apply(system, props)
    except Exception as exc:
        raise RuleError.of(exc) from None


def takes(rules: Sequence[Compiled], system: dict[str, Any], props: Mapping[str, Any]) -> bool:
    """Whether the rules give the message a copy: a rule matches and every matching action runs."""
    try:
        actions = matching_actions(rules, lambda: system, props)
        if actions is None:
            return False
        work_system, work_props = dict(system), dict(props)
        for action in actions:
            run_action(action, work_system, work_props)
    except RuleError:
        return False
    return True
