"""The edit options of resubmit and replay (`--set-property`, `--set-ttl`, ...), declared once.

`@edit_options` puts them in a command's signature in place of its `edits` parameter and hands
the command one `EditOptions`; `compile()` checks them (exit 2 on a bad value) into the typed
`CopyEdits` the operations apply to every copy.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from sbdlq.cli.options import option_group
from sbdlq.operations.edits import CopyEdits, build_edits, example_rows

EDIT = "Edit copies"
R = TypeVar("R")


def _editing(flag: str, help_: str) -> Any:
    """An edit option: shown in the "Edit copies" panel of --help."""
    return typer.Option(flag, help=help_, rich_help_panel=EDIT, show_default=False)


@dataclass(frozen=True)
class EditOptions:
    """The edit options as given on the command line."""

    set_property: Annotated[
        list[str] | None, _editing("--set-property", "Set K=V on every copy (typed like emulator send; repeatable).")
    ] = None
    remove_property: Annotated[
        list[str] | None, _editing("--remove-property", "Remove property K from every copy (repeatable).")
    ] = None
    set_subject: Annotated[str | None, _editing("--set-subject", "Subject (label) of every copy ('' clears it).")] = (
        None
    )
    set_content_type: Annotated[str | None, _editing("--set-content-type", "Content type ('' clears it).")] = None
    set_ttl: Annotated[str | None, _editing("--set-ttl", "Time to live of every copy (30m, 7d, PT1H).")] = None
    set_session_id: Annotated[str | None, _editing("--set-session-id", "Session id ('' clears it).")] = None
    set_correlation_id: Annotated[str | None, _editing("--set-correlation-id", "Correlation id ('' clears it).")] = None

    def compile(self, *, keep_dead_letter_properties: bool = False) -> CopyEdits:
        """The typed edits; BadInput naming the option when a value cannot apply."""
        return build_edits(
            set_property=self.set_property or (),
            remove_property=self.remove_property or (),
            system={
                "subject": self.set_subject,
                "content_type": self.set_content_type,
                "correlation_id": self.set_correlation_id,
                "session_id": self.set_session_id,
                "time_to_live_s": self.set_ttl,
            },
            keep_dead_letter_properties=keep_dead_letter_properties,
        )


NO_EDITS = EditOptions()
# The parameter a command declares to receive the edit options.
EDITS_PARAMETER = "edits"


def edit_options(command: Callable[..., R]) -> Callable[..., R]:
    """Declare the edit options in place of `command`'s `edits` parameter; pass them as one object."""
    return option_group(EditOptions, EDITS_PARAMETER)(command)


def example_table(example: dict[str, Any]) -> None:
    """The dry run's example: what the edits and the copy rules change on one message."""
    from sbdlq.render import Col, table

    table(
        [Col("field", whole=True), Col("before", min_width=8), Col("after", min_width=8)],
        example_rows(example),
        title=f"example: the copy of sequence number {example['sequence_number']}",
    )
