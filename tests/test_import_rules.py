"""Import rules beside test_architecture.py's layers (issue 28 part 3), checked on the source.

- No import cycle inside sbdlq/cli: command modules share cli/reporting.py, cli/options.py and
  cli/settings.py, cli/notes.py, cli/error_path.py and cli/target.py, and never import each other.
- No module imports an underscore name from another module (`from x import _y`, or `x._y` on an
  imported module): what a module shares, it names without the underscore.
Imports inside functions count as well as top-level ones.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import typer
from test_architecture import PACKAGE, _imported_names, _module_name, _modules

CLI = PACKAGE / "cli"
MODULES = {_module_name(path): path for path in _modules(PACKAGE)}


def _command_modules(group: typer.Typer) -> Iterator[str]:
    """The module of every command registered on `group` and its sub-groups (decorators unwrapped)."""
    for command in group.registered_commands:
        assert command.callback is not None
        yield inspect.unwrap(command.callback).__module__
    for sub in group.registered_groups:
        assert sub.typer_instance is not None
        yield from _command_modules(sub.typer_instance)


def _app_command_modules() -> frozenset[str]:
    """The modules the app takes its commands from, read off the app itself (never a list to keep)."""
    from sbdlq.cli.main import app

    return frozenset(_command_modules(app))


#: The modules cli/main.py takes commands from: each may import the shared ones, never another of these.
COMMAND_MODULES = _app_command_modules()


def _cli_edges() -> dict[str, set[str]]:
    """Each sbdlq/cli module → the other sbdlq/cli modules it imports (the package itself aside)."""
    edges: dict[str, set[str]] = {}
    for path in _modules(CLI):
        name = _module_name(path)
        edges[name] = {
            imported
            for imported in _imported_names(path)
            if imported in MODULES and imported.startswith("sbdlq.cli.") and imported != name
        }
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle, each as the path that closes it (depth-first, colours)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_cycle_inside_the_cli() -> None:
    assert _cycles(_cli_edges()) == []


def test_command_modules_are_read_off_the_app() -> None:
    # Every command group is seen, the ones registered late in main.build too.
    assert "sbdlq.cli.commands.emulator_entities" in COMMAND_MODULES
    assert set(MODULES) >= COMMAND_MODULES


def test_command_modules_follow_one_convention() -> None:
    # Issue 39: every module a command comes from is in cli/commands/ and every module there is
    # one; main.COMMANDS, the one list the lazy start and the root's help read, names each; and
    # each is registered the same way, by its `register(parent, name)`.
    from sbdlq.cli.main import COMMANDS

    package = {f"sbdlq.cli.commands.{p.stem}" for p in (CLI / "commands").glob("*.py") if p.stem != "__init__"}
    assert package == COMMAND_MODULES
    assert {f"sbdlq.cli.commands.{module}" for command in COMMANDS for module in command.modules} == package
    for name in sorted(package):
        params = list(inspect.signature(importlib.import_module(name).register).parameters)
        assert params[:2] == ["parent", "name"], name


def test_command_modules_never_import_each_other() -> None:
    crossing = sorted(
        f"{name} imports {other}"
        for name, imported in _cli_edges().items()
        if name in COMMAND_MODULES
        for other in imported & COMMAND_MODULES
    )
    assert crossing == []


def _underscore_imports(path: Path, own: str | None = None) -> list[str]:
    """`module: name` for each underscore name this module (named `own`) takes from another sbdlq module."""
    own = own or _module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    modules_bound: dict[str, str] = {}  # local name → the sbdlq module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = own if path.name == "__init__.py" else own.rpartition(".")[0]
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("sbdlq"):
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    modules_bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif alias.name.startswith("_") and not alias.name.startswith("__") and base != own:
                    found.append(f"{base}: {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sbdlq") and alias.asname:
                    modules_bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules_bound
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and modules_bound[node.value.id] != own
        ):
            found.append(f"{modules_bound[node.value.id]}: {node.attr}")
    return sorted(set(found))


def test_no_module_imports_an_underscore_name_from_another() -> None:
    taken = {
        str(path.relative_to(PACKAGE.parent)): names
        for path in _modules(PACKAGE)
        if (names := _underscore_imports(path))
    }
    assert taken == {}


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    # A checker that silently saw nothing would pass forever: prove it sees both forms and a cycle.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from sbdlq.cli.error_path import _in_process\nfrom sbdlq.cli import target\ntarget._endpoint_port\n"
    )
    assert _underscore_imports(fake, "sbdlq.cli.fake") == [
        "sbdlq.cli.error_path: _in_process",
        "sbdlq.cli.target: _endpoint_port",
    ]
