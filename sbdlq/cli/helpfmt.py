"""`--help` that never cuts an option name, at any width.

Typer's rich help puts each panel's options in a Rich table whose columns may all wrap, so
on an 80-column terminal Rich shrinks the name column too and cuts a long name
(`--keep-dead-letter-pr…`). Here the name columns of those tables never wrap: only the
metavar and help columns give way. Typer builds the table in `typer.rich_utils`, which costs
~40 ms to import, so the change is made the first time help is formatted, not at start-up.
typer.rich_utils also imports rich.markdown and rich.traceback (~45 ms together) for features
sbdlq's help does not use: they get stand-ins that load the real module if ever used.
Checked on typer 0.24 (tests/cli/test_help.py renders every command's help at 80 columns).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from typer.core import TyperCommand, TyperGroup

# The columns at the end of an options row that may wrap: the metavar and the help text.
_WRAPPING_COLUMNS = 2
_installed = False


def install() -> None:
    """Route Typer's help formatting through `_format_help` (idempotent; nothing is imported yet)."""
    global _installed
    if _installed:
        return
    _installed = True
    for cls in (TyperCommand, TyperGroup):
        cls.format_help = _wrapped(cls.format_help)  # type: ignore[method-assign]


def _wrapped(format_help: Any) -> Any:
    def format_help_keeping_names(self: Any, ctx: Any, formatter: Any) -> Any:
        _keep_option_names_whole()
        return format_help(self, ctx, formatter)

    return format_help_keeping_names


def _keep_option_names_whole() -> None:
    """Give typer.rich_utils a Table whose auto-created option-name columns never wrap."""
    rich_utils = _import_rich_utils()

    if getattr(rich_utils.Table, "keeps_option_names", False):
        return

    class OptionsTable(rich_utils.Table):  # type: ignore[misc,name-defined]
        """A Rich table whose columns made by add_row, all but the last two, never wrap."""

        keeps_option_names = True

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            if not self.columns:
                # Typer declares no columns for an options panel: add_row would make plain ones.
                for index in range(len(renderables)):
                    fixed = index < len(renderables) - _WRAPPING_COLUMNS
                    self.add_column(no_wrap=fixed, highlight=self.highlight)
            super().add_row(*renderables, **kwargs)

    rich_utils.Table = OptionsTable  # type: ignore[misc]


# What typer.rich_utils imports but sbdlq's help never uses: rich.markdown (markdown-it) for the
# "markdown" markup mode, rich.traceback (pygments, attrs) for pretty exceptions, which are off.
_DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


def _import_rich_utils() -> Any:
    """typer.rich_utils, with the modules of _DEFERRED loaded only if something uses them."""
    stand_ins = {name: _stand_in(name, cls) for name, cls in _DEFERRED.items() if name not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        from typer import rich_utils
    finally:
        # Only typer's import sees a stand-in: any later import of the module gets the real one.
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return rich_utils


def _stand_in(module_name: str, class_name: str) -> types.ModuleType:
    """A module holding one class that stands for the real module's class of that name."""

    def real() -> Any:
        return getattr(importlib.import_module(module_name), class_name)

    class Forwarding(type):
        """Class attributes (`Traceback.from_exception`) come from the real class."""

        def __getattr__(cls, name: str) -> Any:
            return getattr(real(), name)

    def build(cls: type, *args: Any, **kwargs: Any) -> Any:
        return real()(*args, **kwargs)

    module = types.ModuleType(module_name, f"{module_name}, loaded on first use")
    setattr(module, class_name, Forwarding(class_name, (), {"__new__": build}))
    return module
