"""Azure Service Bus SQL filters and rule actions: used by `--where` and by subscription rules.

The names below load their modules on first use: the emulator engine reads the correlation
tables (`sqlfilter.correlation`) on every start, and the parser only when a SQL rule needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbdlq.sqlfilter.compiled import SqlAction, SqlFilter, compile_action, compile_filter
    from sbdlq.sqlfilter.context import message_context
    from sbdlq.sqlfilter.errors import FilterEvaluationError, SqlFilterSyntaxError

_HOMES = {
    "FilterEvaluationError": "errors",
    "SqlAction": "compiled",
    "SqlFilter": "compiled",
    "SqlFilterSyntaxError": "errors",
    "compile_action": "compiled",
    "compile_filter": "compiled",
    "message_context": "context",
}

__all__ = [
    "FilterEvaluationError",
    "SqlAction",
    "SqlFilter",
    "SqlFilterSyntaxError",
    "compile_action",
    "compile_filter",
    "message_context",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
