"""The `sbdlq ui` command: open the target like every command, then hand it to the app.

No Textual at import time: `sbdlq --help` and the other commands don't pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbdlq import interrupts
from sbdlq.cli.completion import complete_entity
from sbdlq.cli.error_path import handled
from sbdlq.cli.notes import err
from sbdlq.cli.settings import Settings
from sbdlq.cli.target import open_target
from sbdlq.errors import ExitStatus

if TYPE_CHECKING:
    from sbdlq.ui.app import DlqApp

INSTALL_HINT = "sbdlq: the ui needs Textual: pip install 'sbdlq[ui]'"


def ui(
    ctx: typer.Context,
    entity: Annotated[
        str | None,
        typer.Argument(
            help="Open this queue's or subscription's DLQ at start.", show_default=False, autocompletion=complete_entity
        ),
    ] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="Browse only: no resubmit, purge or export.")] = False,
    refresh: Annotated[str, typer.Option("--refresh", help="Refresh the entity counts this often.")] = "10s",
) -> None:
    """Browse and fix dead-letter queues in a terminal console (needs the ui extra)."""
    try:
        import textual  # noqa: F401
    except ImportError:
        err(INSTALL_HINT)
        raise typer.Exit(int(ExitStatus.FAILED))
    with handled(ctx) as s:
        app = build_app(s, entity=entity, read_only=read_only, refresh=refresh)
        interrupts.begin_work()
        app.run()


def build_app(s: Settings, *, entity: str | None, read_only: bool, refresh: str) -> DlqApp:
    """The app over the resolved target, with the profile's tuning (BadInput for a bad option)."""
    from sbdlq.addresses import Address, SubQueue, parse_address
    from sbdlq.errors import BadInput
    from sbdlq.timeparse import parse_duration
    from sbdlq.ui.actions import Tuning
    from sbdlq.ui.app import DlqApp

    refresh_s = parse_duration(refresh, what="--refresh")
    if refresh_s <= 0:
        raise BadInput("--refresh must be positive")
    start = None
    if entity is not None:
        given = parse_address(entity)
        sub_queue = SubQueue.DEAD_LETTER if given.sub_queue is SubQueue.NONE else given.sub_queue
        start = Address(given.entity, sub_queue)
    tuning = Tuning(
        resubmit_batch_size=_tuning(s, "batch_size", 100),
        purge_batch_size=_tuning(s, "batch_size", 500),
        concurrency=_tuning(s, "concurrency", 32),
    )
    backend = open_target(s)
    return DlqApp(
        backend, read_only=read_only, refresh_s=refresh_s, tuning=tuning, target=s.target().describe(), entity=start
    )


def _tuning(s: Settings, key: str, default: int) -> int:
    """The profile's value, else the command's default (as `resubmit` and `purge` resolve it)."""
    value = s.profile_default(key)
    return int(value) if value else default


#: the top-level command of this module, by the name the user types
COMMANDS = {"ui": ui}


def register(parent: typer.Typer, name: str) -> None:
    """Add the command `name` of `COMMANDS` to `parent` (Textual is imported only when it runs)."""
    parent.command(name)(COMMANDS[name])
