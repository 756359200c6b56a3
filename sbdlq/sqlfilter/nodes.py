"""The syntax tree the parser builds and the evaluator compiles; `pos` is 1-based."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SYS = "sys"
USER = "user"


@dataclass(frozen=True, slots=True)
class Const:
    """A constant: int, float, str, bool or None (NULL)."""

    value: Any
    pos: int


@dataclass(frozen=True, slots=True)
class Prop:
    """`[scope.]name`; for sys scope `name` is the canonical system property name."""

    scope: str
    name: str
    pos: int


@dataclass(frozen=True, slots=True)
class Func:
    """`newid()` or `property(expr)` / `p(expr)`, named here `newid` or `property`."""

    name: str
    args: tuple[Node, ...]
    pos: int


@dataclass(frozen=True, slots=True)
class Unary:
    """Prefix `+` or `-`."""

    op: str
    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Arith:
    """A left-associative chain `first op1 x1 op2 x2 ...` of `+ - * / %`."""

    first: Node
    rest: tuple[tuple[str, Node], ...]
    pos: int


@dataclass(frozen=True, slots=True)
class Compare:
    """`left op right`; `op` is one of = <> < <= > >= (`!=` is stored as `<>`)."""

    op: str
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True, slots=True)
class In:
    """`left [NOT] IN (items...)`."""

    left: Node
    items: tuple[Node, ...]
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class Like:
    """`left [NOT] LIKE pattern [ESCAPE escape]`."""

    left: Node
    pattern: Node
    escape: Node | None
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class IsNull:
    """`prop IS [NOT] NULL`."""

    prop: Prop
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class Exists:
    """`EXISTS(prop)`."""

    prop: Prop
    pos: int


@dataclass(frozen=True, slots=True)
class Not:
    """`NOT predicate`."""

    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Logical:
    """`a AND b AND ...` or `a OR b OR ...`, flattened so long chains stay shallow."""

    op: str
    operands: tuple[Node, ...]
    pos: int


@dataclass(frozen=True, slots=True)
class SetStmt:
    """Action statement `SET prop = value`."""

    prop: Prop
    value: Node
    pos: int


@dataclass(frozen=True, slots=True)
class RemoveStmt:
    """Action statement `REMOVE prop`."""

    prop: Prop
    pos: int


Node = Const | Prop | Func | Unary | Arith | Compare | In | Like | IsNull | Exists | Not | Logical
Statement = SetStmt | RemoveStmt

# Nodes whose value is TRUE / FALSE / unknown rather than a scalar.
PREDICATES = (Compare, In, Like, IsNull, Exists, Not, Logical)


def is_predicate(node: Node) -> bool:
    """Whether `node` can stand where the grammar wants a <predicate>."""
    # TRUE and FALSE constants are accepted as predicates (as in `TRUE` or `NOT FALSE`).
    return isinstance(node, PREDICATES) or (isinstance(node, Const) and isinstance(node.value, bool))
