"""The `sbdlq emulator` group, and the local store its commands act on: which one, and its admin operations.

Shared by commands/emulator.py and commands/emulator_entities.py, which both add their commands to
the group (command modules import this, never each other).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import typer

from sbdlq.cli.settings import Settings
from sbdlq.cli.target import open_target
from sbdlq.errors import BadInput

if TYPE_CHECKING:
    from sbdlq.emulator.admin import EmulatorAdmin

#: the `sbdlq emulator` group: commands/emulator.py's commands and commands/emulator_entities.py's
emulator_group = typer.Typer(
    name="emulator",
    help="The local emulator: init, list, send, receive, demo, reset, serve, ca.",
    no_args_is_help=True,
)

NO_STORE_HINT = "create one with `sbdlq emulator init` or `sbdlq emulator demo`"


def emulator_settings(s: Settings) -> Settings:
    """Settings whose target is the emulator store, whatever connection string the environment holds."""
    for key, flag in (("connection_string", "--connection-string"), ("namespace", "--namespace")):
        value, source = s.options.get(key, (None, "default"))
        if value and source == "option":
            raise BadInput(
                f"{flag} does not apply to `sbdlq emulator`", hint="it acts on a local store: --emulator PATH"
            )
    options = {k: v for k, v in s.options.items() if k in ("emulator", "timeout")}
    local = dataclasses.replace(s, options=options, _target=None)
    target = local.target()
    if target.kind != "emulator":
        raise BadInput(
            f"{target.source} names a Service Bus namespace, not an emulator store",
            hint="pass --emulator PATH",
        )
    return local


def store_path(s: Settings) -> str:
    """Where the emulator store of these (emulator) settings lives."""
    return s.target().value


@asynccontextmanager
async def open_store(s: Settings, *, create: bool = False) -> AsyncIterator[EmulatorAdmin]:
    """The admin operations of the emulator store (created with create=True; else it must exist)."""
    async with open_target(s, create=create) as backend:
        yield backend.admin()
