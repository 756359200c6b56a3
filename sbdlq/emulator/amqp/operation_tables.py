"""What the operation tables of `$management` (session_ops.py, rule_ops.py) share.

An operation is called with the engine, the node's address, the request body and the session
holder of the link the request names, and answers (status, body): management.py wraps that
in its Reply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sbdlq.addresses import Address
from sbdlq.emulator.engine import Engine
from sbdlq.errors import BadInput

from .plain_values import as_text

Outcome = tuple[int, Any]
Operation = Callable[[Engine, Address, dict[str, Any], str | None], Outcome]
#: A listing's page when the request gives no `top`.
PAGE = 100


def required_text(body: dict[str, Any], key: str) -> str:
    """The request's `key`, as text; BadInput when it is missing or empty."""
    value = as_text(body.get(key))
    if not value:
        raise BadInput(f"{key} is required")
    return value


def paging(body: dict[str, Any]) -> tuple[int, int]:
    """A listing request's `skip` and `top`."""
    return int(body.get("skip") or 0), int(body.get("top") or PAGE)
