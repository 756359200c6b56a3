"""The syntax tree the parser builds and the evaluator compiles; `pos` is 1-based."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, dataclass_transform

SYS = "sys"
USER = "user"

_T = TypeVar("_T")


@dataclass_transform()
def node(cls: type[_T]) -> type[_T]:
    """Declares a class of the tree: a frozen, slotted dataclass (equal when its fields are)."""
    return dataclass(frozen=True, slots=True)(cls)


@node
class Const:
    """A constant: int, float, str, bool or None (NULL)."""

    value: Any
    pos: int


@node
class Prop:
    """`[scope.]name`; for sys scope `name` is the canonical system property name."""

    scope: str
    name: str
    pos: int


@node
class Func:
    """`newid()` or `property(expr)` / `p(expr)`, named here `newid` or `property`."""

    name: str
    args: tuple[Node, ...]
    pos: int


@node
class Unary:
    """Prefix `+` or `-`."""

    op: str
    operand: Node
    pos: int


@node
class Arith:
    """A left-associative chain `first op1 x1 op2 x2 ...` of `+ - * / %`."""

    first: Node
    rest: tuple[tuple[str, Node], ...]
    pos: int


@node
class Compare:
    """`left op right`; `op` is one of = <> < <= > >= (`!=` is stored as `<>`)."""

    op: str
    left: Node
    right: Node
    pos: int


@node
class In:
    """`left [NOT] IN (items...)`."""

    left: Node
    items: tuple[Node, ...]
    negated: bool
    pos: int


@node
class Like:
    """`left [NOT] LIKE pattern [ESCAPE escape]`."""

    left: Node
    pattern: Node
    escape: Node | None
    negated: bool
    pos: int


@node
class IsNull:
    """`prop IS [NOT] NULL`."""

    prop: Prop
    negated: bool
    pos: int


@node
class Exists:
    """`EXISTS(prop)`."""

    prop: Prop
    pos: int


@node
class Not:
    """`NOT predicate`."""

    operand: Node
    pos: int


@node
class Logical:
    """`a AND b AND ...` or `a OR b OR ...`, flattened so long chains stay shallow."""

    op: str
    operands: tuple[Node, ...]
    pos: int


@node
class SetStmt:
    """Action statement `SET prop = value`."""

    prop: Prop
    value: Node
    pos: int


@node
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
