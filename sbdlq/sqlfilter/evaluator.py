"""Compiles syntax trees into closures over (system, properties); evaluation never re-parses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID, uuid4

from sbdlq.sqlfilter import nodes as n
from sbdlq.sqlfilter.errors import FilterEvaluationError
from sbdlq.sqlfilter.like import like_matcher
from sbdlq.sqlfilter.sysprops import SETTABLE, canonical
from sbdlq.sqlfilter.value_semantics import (
    COMPARE_OPS,
    FLIPPED,
    SPAN,
    TIME,
    arith,
    coerce_text,
    compare,
    equality_key,
    kind_of,
    negate,
    net_type,
    plus,
)

Props = Mapping[str, Any]
Eval = Callable[[Props, Props], Any]
Exec = Callable[[dict[str, Any], dict[str, Any]], None]


# --- user property lookup ----------------------------------------------------------------
# "Property names are case-insensitive": an exact hit is the fast path, a scan the fallback.


def _find_key(props: Props, name: str, lname: str) -> str | None:
    if name in props:
        return name
    for key in props:
        if isinstance(key, str) and key.lower() == lname:
            return key
    return None


def _user_getter(name: str) -> Eval:
    lname = name.lower()

    def get(s: Props, p: Props) -> Any:
        value = p.get(name)
        if value is None and name not in p:
            key = _find_key(p, name, lname)
            return None if key is None else p[key]
        return value

    return get


def _system_getter(name: str) -> Eval:
    def get(s: Props, p: Props) -> Any:
        return s.get(name)

    return get


def _dynamic_property(name: Any) -> Eval:
    """`property(name)`: the property named by a string computed at run time."""
    if name is None:
        return lambda s, p: None
    if not isinstance(name, str):
        raise FilterEvaluationError(
            "InvalidCastException", f"property() needs a System.String name, not {net_type(name)}."
        )
    scope, dot, rest = name.partition(".")
    if dot and scope.lower() == n.SYS:
        canon = canonical(rest)
        if canon is None:
            # "An attempt to evaluate a non-existent system property throws a FilterException."
            raise FilterEvaluationError("FilterException", f"The system property '{name}' does not exist.")
        return _system_getter(canon)
    return _user_getter(rest if dot and scope.lower() == n.USER else name)


# --- compilation -------------------------------------------------------------------------


def compile_node(node: n.Node) -> Eval:
    """A closure computing `node` from (system, properties); None stands for unknown."""
    return _COMPILERS[type(node)](node)


def _const(node: Any) -> Eval:
    value = node.value
    return lambda s, p: value


def _prop(node: Any) -> Eval:
    return _system_getter(node.name) if node.scope == n.SYS else _user_getter(node.name)


def _func(node: Any) -> Eval:
    if node.name == "newid":
        return lambda s, p: uuid4()
    name_of = compile_node(node.args[0])
    return lambda s, p: _dynamic_property(name_of(s, p))(s, p)


def _unary(node: Any) -> Eval:
    operand = compile_node(node.operand)
    fn = negate if node.op == "-" else plus
    return lambda s, p: fn(operand(s, p))


def _arith(node: Any) -> Eval:
    first = compile_node(node.first)
    rest = [(op, compile_node(x)) for op, x in node.rest]
    if len(rest) == 1:
        op, second = rest[0]
        return lambda s, p: arith(op, first(s, p), second(s, p))

    def fold(s: Props, p: Props) -> Any:
        value = first(s, p)
        for op, fn in rest:
            value = arith(op, value, fn(s, p))
        return value

    return fold


def _compare(node: Any) -> Eval:
    op, left, right = node.op, node.left, node.right
    if isinstance(right, n.Const) and right.value is not None:
        return _compare_const(op, compile_node(left), right.value)
    if isinstance(left, n.Const) and left.value is not None:
        return _compare_const(FLIPPED[op], compile_node(right), left.value)
    lhs, rhs = compile_node(left), compile_node(right)
    return lambda s, p: compare(op, lhs(s, p), rhs(s, p))


def _compare_const(op: str, get: Eval, const: Any) -> Eval:
    """`get op const`, with a shortcut when the value has the constant's exact type."""
    ctype = type(const)
    pyop = COMPARE_OPS[op]
    if ctype is str:
        return _compare_text(op, get, const)
    if ctype not in (int, float):
        return lambda s, p: compare(op, get(s, p), const)

    def cmp(s: Props, p: Props) -> bool | None:
        value = get(s, p)
        if type(value) is ctype:
            return pyop(value, const)
        return compare(op, value, const)

    return cmp


def _compare_text(op: str, get: Eval, const: str) -> Eval:
    """`get op 'text'`; the text's reading as a time or time span is parsed once, when first needed."""
    pyop = COMPARE_OPS[op]
    readings: dict[str, Any] = {}

    def cmp(s: Props, p: Props) -> bool | None:
        value = get(s, p)
        if type(value) is str:
            return pyop(value, const)
        if value is None:
            return None
        kind = kind_of(value)
        if kind not in (TIME, SPAN):
            return compare(op, value, const)
        if kind not in readings:
            readings[kind] = coerce_text(const, kind)
        return compare(op, value, readings[kind])

    return cmp


def _in(node: Any) -> Eval:
    left = compile_node(node.left)
    negated: bool = node.negated
    items = [compile_node(x) for x in node.items]

    def slow(value: Any, s: Props, p: Props) -> bool:
        # "If the left operand is evaluated as unknown, then the result is unknown"; items
        # that are unknown or of another kind just don't match.
        return any(compare("=", value, item(s, p)) for item in items)

    if all(isinstance(x, n.Const) for x in node.items):
        keys = frozenset(equality_key(x.value) for x in node.items if x.value is not None)

        def member(s: Props, p: Props) -> bool | None:
            value = left(s, p)
            if value is None:
                return None
            try:
                found = equality_key(value) in keys
            except TypeError:  # unhashable value: compare one by one
                found = slow(value, s, p)
            if not found and kind_of(value) in (TIME, SPAN):
                found = slow(value, s, p)  # string constants may spell a time
            return found != negated

        return member

    def member_slow(s: Props, p: Props) -> bool | None:
        value = left(s, p)
        if value is None:
            return None
        return slow(value, s, p) != negated

    return member_slow


def _like(node: Any) -> Eval:
    left = compile_node(node.left)
    negated: bool = node.negated
    pattern, escape = node.pattern, node.escape
    if (
        isinstance(pattern, n.Const)
        and isinstance(pattern.value, str)
        and (escape is None or (isinstance(escape, n.Const) and isinstance(escape.value, str)))
    ):
        matcher = like_matcher(pattern.value, None if escape is None else escape.value)

        def like_const(s: Props, p: Props) -> bool | None:
            value = left(s, p)
            if not isinstance(value, str):
                return None  # unknown, or not a string: LIKE only applies to strings
            return matcher(value) != negated

        return like_const

    pattern_of = compile_node(pattern)
    escape_of = compile_node(escape) if escape is not None else None

    def like_dynamic(s: Props, p: Props) -> bool | None:
        value, pat = left(s, p), pattern_of(s, p)
        esc = escape_of(s, p) if escape_of is not None else None
        if not isinstance(value, str) or not isinstance(pat, str):
            return None
        if escape_of is not None and esc is None:
            return None
        if esc is not None and not (isinstance(esc, str) and len(esc) == 1):
            raise FilterEvaluationError("ArgumentException", "The ESCAPE character must be a string of length 1.")
        try:
            return like_matcher(pat, esc)(value) != negated
        except ValueError as exc:
            raise FilterEvaluationError("ArgumentException", str(exc))

    return like_dynamic


def _is_null(node: Any) -> Eval:
    get = _prop(node.prop)
    if node.negated:
        return lambda s, p: get(s, p) is not None
    return lambda s, p: get(s, p) is None


def _exists(node: Any) -> Eval:
    prop: n.Prop = node.prop
    name = prop.name
    if prop.scope == n.SYS:
        # A system property "exists" when the message has a value for it.
        return lambda s, p: s.get(name) is not None
    lname = name.lower()
    return lambda s, p: name in p or _find_key(p, name, lname) is not None


def _not(node: Any) -> Eval:
    operand = compile_node(node.operand)

    def negation(s: Props, p: Props) -> bool | None:
        value = operand(s, p)
        return None if value is None else not value

    return negation


def _logical(node: Any) -> Eval:
    # Three-valued logic, left to right, stopping as soon as the answer is known:
    # AND stops at FALSE, OR at TRUE; otherwise any unknown makes the result unknown.
    operands = [compile_node(x) for x in node.operands]
    stop = node.op == "OR"

    def combine(s: Props, p: Props) -> bool | None:
        unknown = False
        for operand in operands:
            value = operand(s, p)
            if value is stop:
                return stop
            if value is None:
                unknown = True
        return None if unknown else not stop

    return combine


_COMPILERS: dict[type, Callable[[Any], Eval]] = {
    n.Const: _const,
    n.Prop: _prop,
    n.Func: _func,
    n.Unary: _unary,
    n.Arith: _arith,
    n.Compare: _compare,
    n.In: _in,
    n.Like: _like,
    n.IsNull: _is_null,
    n.Exists: _exists,
    n.Not: _not,
    n.Logical: _logical,
}


# --- actions -----------------------------------------------------------------------------


def _store_user(props: dict[str, Any], name: str, lname: str, value: Any) -> None:
    key = _find_key(props, name, lname) or name  # keep the existing spelling of the name
    old = props.get(key)
    if isinstance(value, UUID):
        value = str(value)  # newid(): store text so the property serializes anywhere
    elif type(old) is float and type(value) is int:
        value = float(value)  # "SET performs implicit conversion if possible" (long -> double)
    props[key] = value


def compile_statement(stmt: n.Statement) -> Exec:
    """A closure applying one SET or REMOVE to (system, properties) in place."""
    prop = stmt.prop
    name, lname = prop.name, prop.name.lower()
    if isinstance(stmt, n.RemoveStmt):

        def remove(s: dict[str, Any], p: dict[str, Any]) -> None:
            for key in [k for k in p if k == name or (isinstance(k, str) and k.lower() == lname)]:
                del p[key]

        return remove
    value_of = compile_node(stmt.value)
    if prop.scope == n.SYS:
        convert = SETTABLE[name]

        def set_system(s: dict[str, Any], p: dict[str, Any]) -> None:
            s[name] = convert(value_of(s, p))

        return set_system

    def set_user(s: dict[str, Any], p: dict[str, Any]) -> None:
        _store_user(p, name, lname, value_of(s, p))

    return set_user
