"""The application property names a filter compares with each other: `tenant = eu` names `tenant` and `eu`.

A bare word on the right of a comparison is a property name in the SQL filter syntax, not text:
`tenant = eu` compares two properties and, where no message has a property `eu`, selects
nothing. The selection hint (sbdlq/nearest.py) says so when it sees no such property.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sbdlq.sqlfilter import nodes as n
from sbdlq.sqlfilter.parser import parse_filter


def compared_names(expression: str, parameters: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The user property names of comparisons whose both sides are properties, in order, each once."""
    names: dict[str, None] = {}
    for node in _walk(parse_filter(expression, parameters)):
        sides: tuple[Any, ...] = ()
        if isinstance(node, n.Compare):
            sides = (node.left, node.right)
        elif isinstance(node, n.In):
            sides = (node.left, *node.items)
        elif isinstance(node, n.Like):
            sides = (node.left, node.pattern)
        props = [s for s in sides if isinstance(s, n.Prop)]
        if len(props) >= 2:
            names.update((p.name, None) for p in props if p.scope == n.USER)
    return tuple(names)


def _walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, n.Logical):
        for operand in node.operands:
            yield from _walk(operand)
    elif isinstance(node, n.Not):
        yield from _walk(node.operand)
