"""The command modules keep ARCHITECTURE's recipe: each declares what it adds in `COMMANDS`,
its `register` adds any of them by name, the root's line for a command is the command's own
summary, and a command module imports nothing heavy when it is loaded.

A new command written as the recipe says (the function, one entry in its module's `COMMANDS`,
one `Command` in cli/main.py `COMMANDS`) passes here; a step left out fails with the step named.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from types import ModuleType

import pytest
import typer
from typer.main import get_group

from sbdlq.cli.main import COMMANDS, Command, app

#: what a command module must not load when it is imported (a start loads one command module:
#: these are paid only by the command that runs them, inside its function)
HEAVY = ("azure", "proton", "_proton", "asyncio", "textual", "cryptography", "yaml", "rich.markdown", "rich.traceback")
#: the modules of each top-level command or group, in main.COMMANDS's order
MODULES = [(command, module) for command in COMMANDS for module in command.modules]


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"sbdlq.cli.commands.{name}")


@pytest.mark.parametrize(("command", "module"), MODULES, ids=[f"{c.name}:{m}" for c, m in MODULES])
def test_each_command_module_declares_what_it_adds(command: Command, module: str) -> None:
    declared = getattr(_module(module), "COMMANDS", None)
    assert isinstance(declared, dict), f"cli/commands/{module}.py has no COMMANDS {{name: function or Typer app}}"
    if module == command.modules[0]:
        # the module that adds the command (or group) itself names it
        assert command.name in declared, f"cli/commands/{module}.py COMMANDS lacks {command.name!r}"
    else:
        # a module that adds to a group another module owns names the subcommands it adds
        group = get_group(app).commands[command.name]
        assert set(declared) <= set(group.commands), f"cli/commands/{module}.py adds what `{command.name}` lacks"


@pytest.mark.parametrize("module", sorted({c.modules[0] for c in COMMANDS if c.modules}))
def test_register_adds_every_command_its_module_declares(module: str) -> None:
    # The recipe's step 2: an entry in COMMANDS is all `register(parent, name)` needs; no other
    # list in the module names the commands (the KeyError a newcomer would meet otherwise).
    for name, target in _module(module).COMMANDS.items():
        parent = typer.Typer()
        parent.command("other")(lambda: None)  # a Typer with one command would make it the root
        _module(module).register(parent, name)
        added = get_group(parent).commands
        assert name in added, f"cli/commands/{module}.py register({name!r}) added nothing"
        if isinstance(target, typer.Typer):
            assert set(added[name].commands) >= set(get_group(target).commands)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.modules], ids=lambda c: c.name)
def test_the_roots_line_is_the_commands_own_summary(command: Command) -> None:
    # `sbdlq --help` prints main.COMMANDS' lines without importing a command module; the whole
    # app prints the commands' own help, and the two must be the same bytes
    # (tests/cli/test_startup_paths.py::test_the_console_script_answers_as_the_whole_app_does).
    target = _module(command.modules[0]).COMMANDS[command.name]
    own = target.info.help if isinstance(target, typer.Typer) else inspect.getdoc(target)
    summary = " ".join((own or "").split("\n\n")[0].split())
    assert command.help == summary, (
        f"cli/main.py COMMANDS: the line of {command.name!r} must be its "
        f"{'group help' if command.group else 'docstring'} summary word for word: {summary!r}"
    )


def test_a_command_module_imports_nothing_heavy() -> None:
    # Each module in its own interpreter: one already loaded by another would hide its imports.
    code = (
        "import sys, importlib\n"
        "for name in sys.argv[1:]:\n"
        "    before = set(sys.modules)\n"
        "    importlib.import_module('sbdlq.cli.commands.' + name)\n"
        f"    heavy = sorted(m for m in set(sys.modules) - before if m.startswith({HEAVY!r}))\n"
        "    print(name, ' '.join(heavy))\n"
    )
    modules = sorted({module for _, module in MODULES})
    lines = []
    for module in modules:
        proc = subprocess.run([sys.executable, "-c", code, module], capture_output=True, text=True, check=True)
        lines += proc.stdout.splitlines()
    assert [line for line in lines if line.strip() not in modules] == [], "import these inside the command function"
