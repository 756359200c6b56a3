"""Azure Service Bus SQL filters and rule actions: used by `--where` and by emulator topic rules."""

from sbdlq.sqlfilter.context import message_context
from sbdlq.sqlfilter.errors import FilterEvaluationError, SqlFilterSyntaxError
from sbdlq.sqlfilter.rules import SqlAction, SqlFilter, compile_action, compile_filter

__all__ = [
    "FilterEvaluationError",
    "SqlAction",
    "SqlFilter",
    "SqlFilterSyntaxError",
    "compile_action",
    "compile_filter",
    "message_context",
]
