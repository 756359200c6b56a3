"""The two ways a SQL filter or action fails: bad text, or a throw while evaluating."""

from __future__ import annotations

from sbdlq.errors import BadInput


class SqlFilterSyntaxError(BadInput):
    """The filter or action text is not valid; `position` is 1-based when known."""

    def __init__(self, message: str, position: int | None = None) -> None:
        text = f"syntax error at position {position}: {message}" if position is not None else message
        super().__init__(text)
        self.position = position


class FilterEvaluationError(Exception):
    """Evaluation threw; `type_name` is the .NET-style exception name the broker reports."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
