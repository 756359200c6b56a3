"""The edit options of resubmit and replay (`--set-property`, `--set-ttl`, ...), declared once.

They are declared once, without Typer, in `operations/edits.EDIT_OPTIONS` (the policy file's edit
keys read the same list). `@edit_options` puts them in a command's signature in place of its
`edits` parameter and hands the command one `EditOptions`; `compile()` checks them (exit 2 on a
bad value) into the typed `CopyEdits` the operations apply to every copy.
"""

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import typer

from sbdlq.cli.options import replacing
from sbdlq.operations.edits import EDIT_OPTIONS, CopyEdits, EditOption, compile_edits

EDIT = "Edit copies"
R = TypeVar("R")


def _editing(option: EditOption) -> inspect.Parameter:
    """The Typer parameter of an edit option: shown in the "Edit copies" panel of --help."""
    kind = list[str] | None if option.repeatable else str | None
    declared = typer.Option(option.flag, help=option.help, rich_help_panel=EDIT, show_default=False)
    return inspect.Parameter(
        option.keyword, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=Annotated[kind, declared]
    )


@dataclass(frozen=True)
class EditOptions:
    """The edit options as given on the command line (`EDIT_OPTIONS`, keyword → value)."""

    given: Mapping[str, Any] = field(default_factory=dict)

    def compile(self, *, keep_dead_letter_properties: bool = False) -> CopyEdits:
        """The typed edits; BadInput naming the option when a value cannot apply."""
        return compile_edits(self.given, keep_dead_letter_properties=keep_dead_letter_properties)


NO_EDITS = EditOptions()
# The parameter a command declares to receive the edit options.
EDITS_PARAMETER = "edits"


def edit_options(command: Callable[..., R]) -> Callable[..., R]:
    """Declare every edit option (`EDIT_OPTIONS`) in place of `command`'s `edits` parameter; pass them as one object."""
    declared = [_editing(option) for option in EDIT_OPTIONS]
    return replacing(EDITS_PARAMETER, declared, EditOptions)(command)
