"""The house rules of DESIGN §1, checked on the source so they stay true.

The engine knows nothing of the CLI or the backends; the CLI knows nothing of SQLite and reaches
the engine only through `emulator/admin.py` or a Backend. Modules stay small (700 lines) and
functions short (80 lines). Imports inside functions count as well as top-level ones.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sbdlq"
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def _modules(folder: Path) -> list[Path]:
    """Every Python module below a folder, sorted for stable test ids."""
    return sorted(folder.rglob("*.py"))


def _module_name(path: Path) -> str:
    """`sbdlq.emulator.amqp.server` for sbdlq/emulator/amqp/server.py (packages name their __init__)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_names(path: Path) -> Iterator[str]:
    """The absolute names a module imports, with relative imports resolved and `from X import y` as X.y too."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _violations(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    """`file: name` for every import below sbdlq/<folder> of a forbidden module or its submodules."""
    found = []
    for path in _modules(PACKAGE / folder):
        for name in _imported_names(path):
            if any(name == bad or name.startswith(bad + ".") for bad in forbidden):
                found.append(f"{path.relative_to(PACKAGE.parent)}: {name}")
    return sorted(set(found))


def test_the_emulator_imports_nothing_from_the_backends_or_the_cli() -> None:
    assert _violations("emulator", ("sbdlq.backends", "sbdlq.cli")) == []


def test_the_cli_never_touches_sqlite_or_the_engine_directly() -> None:
    assert _violations("cli", ("sqlite3", "sbdlq.emulator.engine", "sbdlq.emulator.store")) == []


def test_operations_and_sqlfilter_run_no_emulator_engine_code() -> None:
    # The routing check evaluates rules on a namespace too: with sbdlq.sqlfilter, as the engine does.
    assert _violations("operations", ("sbdlq.emulator.engine", "sbdlq.emulator.store")) == []
    assert _violations("sqlfilter", ("sbdlq.emulator",)) == []


@pytest.mark.parametrize("folder", ["policy", "ui", "operations", "backends"])
def test_the_layers_below_the_cli_never_import_it(folder: str) -> None:
    # The cli builds on them (Typer options from their plain declarations), never the other way:
    # the edit options are operations/edits.EDIT_OPTIONS, `sbdlq ui` is cli/commands/ui.py.
    assert _violations(folder, ("sbdlq.cli",)) == []


def test_the_output_package_never_imports_the_cli_or_a_policy() -> None:
    # sbdlq/output writes what the commands hand it: the cli and apply's report call it, not the other way.
    assert _violations("output", ("sbdlq.cli", "sbdlq.policy")) == []


def test_the_operations_and_the_selection_use_no_emulator_module() -> None:
    # The K=V typing they share with `emulator send` is sbdlq/property_values.py, below both.
    assert _violations("operations", ("sbdlq.emulator",)) == []
    assert _violations("policy", ("sbdlq.emulator",)) == []
    selection = [n for n in _imported_names(PACKAGE / "selection.py") if n.startswith("sbdlq.emulator")]
    assert selection == []


def _importers_of(forbidden: tuple[str, ...], *, above: tuple[str, ...]) -> list[str]:
    """`file: name` for each module outside `above` (folders or modules) importing a forbidden one."""
    found = []
    for path in _modules(PACKAGE):
        relative = path.relative_to(PACKAGE).as_posix()
        if any(relative == top or relative.startswith(top + "/") for top in above):
            continue
        for name in _imported_names(path):
            if any(name == bad or name.startswith(bad + ".") for bad in forbidden):
                found.append(f"{path.relative_to(PACKAGE.parent)}: {name}")
    return sorted(set(found))


def test_nothing_below_the_cli_imports_the_profiles() -> None:
    # The cli resolves the target (profiles.Target) and hands backends.open_backend what it needs.
    assert _importers_of(("sbdlq.profiles",), above=("cli", "profiles.py", "entry.py")) == []


def test_every_did_you_mean_goes_through_nearest() -> None:
    # One rule for "the closest name" (case-insensitive, one cutoff): nearest.closest.
    users = [p for p in _modules(PACKAGE) if any(n.split(".")[0] == "difflib" for n in _imported_names(p))]
    assert [str(p.relative_to(PACKAGE)) for p in users] == ["nearest.py"]


def test_no_module_below_the_commands_has_a_name_issue_39_retired() -> None:
    # One name had meant several jobs in several layers (run, routing, renewal) or none (files,
    # network): each job has its own name now (moving_run, loopless, settlement, routing_check,
    # router, lock_keeper, lock_renewal, named_files, transport). A command module is named after
    # its command (cli/commands/routing.py is `sbdlq routing`).
    retired = {"run", "runs", "run_inline", "routing", "renewal", "files", "network"}
    below = [path for path in PACKAGE.rglob("*.py") if "commands" not in path.parts]
    assert sorted(str(path.relative_to(PACKAGE)) for path in below if path.stem in retired) == []


#: The modules that may share a basename with another, each on purpose; every other name says one
#: job and means it in one place (issue 39). A pattern matches a path from its right (Path.match).
SHARED_NAMES_ALLOWED = (
    "__init__.py",  # a package's own module: Python's name, not ours
    "errors.py",  # each layer's named errors (sbdlq, the engine, the Service Bus edge, sqlfilter)
    "cli/commands/*.py",  # a command module is named after its command (`sbdlq spread`: sbdlq/cli/commands/spread.py)
    "policy/actions/*.py",  # an action module after its action (`purge`), beside the actions' interface
)


def _sharing_a_basename(paths: list[Path], allowed: tuple[str, ...]) -> list[str]:
    """The paths whose basename another path has too, the allowed patterns left out."""
    kept = [p for p in paths if not any(p.match(pattern) for pattern in allowed)]
    by_name: dict[str, list[Path]] = {}
    for path in kept:
        by_name.setdefault(path.name, []).append(path)
    return sorted(str(p) for group in by_name.values() if len(group) > 1 for p in group)


def test_no_two_modules_share_a_basename_except_on_purpose() -> None:
    # One `admin` module was the emulator's library, another the Service Bus management endpoint;
    # one `rules` the engine's stored rules, another sqlfilter's compiled ones: a name found in
    # two layers makes a reader open the wrong one.
    modules = [p.relative_to(PACKAGE) for p in _modules(PACKAGE)]
    assert _sharing_a_basename(modules, SHARED_NAMES_ALLOWED) == []


def test_no_two_test_files_share_a_basename() -> None:
    # pytest imports test files by basename (no __init__.py in tests/): a second one fails to import.
    tests = [p.relative_to(PACKAGE.parent) for p in sorted((PACKAGE.parent / "tests").rglob("test_*.py"))]
    assert _sharing_a_basename(tests, ()) == []


def test_the_basename_check_sees_what_it_looks_for() -> None:
    paths = [Path("emulator/engine/rules.py"), Path("sqlfilter/rules.py"), Path("cli/commands/spread.py")]
    paths += [Path("operations/spread.py"), Path("errors.py"), Path("sqlfilter/errors.py")]
    assert _sharing_a_basename(paths, SHARED_NAMES_ALLOWED) == ["emulator/engine/rules.py", "sqlfilter/rules.py"]


def test_the_import_check_sees_lazy_and_relative_imports() -> None:
    # A checker that silently saw nothing would pass forever: prove it sees both forms.
    amqp = PACKAGE / "emulator" / "amqp"
    assert "sbdlq.emulator.clock.emulator_clock" in set(_imported_names(amqp / "server.py"))
    assert "sbdlq.emulator.amqp.sas" in set(_imported_names(amqp / "cbs.py"))


@pytest.mark.parametrize("path", _modules(PACKAGE), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_and_functions_stay_small(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= MAX_MODULE_LINES
    long_functions = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long_functions == []


#: What asks "is a person there?" or asks the person: terminal.py's job alone (issue 39 item 3).
TERMINAL_ATTRIBUTES = frozenset({"isatty", "is_terminal"})
PROMPTS = frozenset({"confirm", "prompt", "getpass"})  # typer.confirm, click.prompt, getpass.getpass ...
PROMPT_MODULES = ("rich.prompt", "getpass", "click.termui")
#: The libraries whose prompts a module could import by name (`from click import confirm`).
PROMPTING_LIBRARIES = ("click", "typer", "click.termui", "getpass")
PROMPT_IMPORTS = frozenset(f"{library}.{name}" for library in PROMPTING_LIBRARIES for name in PROMPTS)


def _terminal_questions(path: Path) -> list[str]:
    """`line: what` for each terminal check or prompt in a module outside the seam."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = [
        f"{node.lineno}: import {name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in _imported_names_of(node)
        if name in PROMPT_IMPORTS or any(name == bad or name.startswith(bad + ".") for bad in PROMPT_MODULES)
    ]
    # The local names such an import binds: a bare `confirm(...)` is then a library's prompt.
    prompts = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in PROMPTING_LIBRARIES
        for alias in node.names
        if alias.name in PROMPTS
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in TERMINAL_ATTRIBUTES:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"input", *prompts}:
            found.append(f"{node.lineno}: {node.func.id}()")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {*PROMPTS, "input"}
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in {"typer", "click", "getpass", "console", "con"}
        ):
            found.append(f"{node.lineno}: {node.func.value.id}.{node.func.attr}()")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def _imported_names_of(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    else:
        yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_only_the_terminal_seam_asks_whether_a_person_is_there() -> None:
    # One seam (sbdlq/terminal.py) for whether each stream is a terminal and for the one
    # confirmation, whose no is one exit status; tests stand in an Environment there.
    found = {
        str(path.relative_to(PACKAGE.parent)): questions
        for path in _modules(PACKAGE)
        if path != PACKAGE / "terminal.py" and (questions := _terminal_questions(path))
    }
    assert found == {}


def test_the_terminal_check_sees_what_it_looks_for(tmp_path: Path) -> None:
    # A checker that silently saw nothing would pass forever: prove it sees each form.
    fake = tmp_path / "fake.py"
    fake.write_text(
        "import sys, typer\nfrom rich.prompt import Confirm\n"
        "sys.stdin.isatty()\ncon.is_terminal\ntyper.confirm('q')\ninput('q')\nconsole.input('q')\n"
        "from click import confirm\nfrom typer import prompt as ask\nconfirm('q')\nask('q')\n"
        # The seam's own confirm, imported by name, is the one allowed.
        "from sbdlq.terminal import confirm as yes\nyes('q')\nfrom typer import Exit\n"
    )
    assert _terminal_questions(fake) == [
        "2: import rich.prompt.Confirm",
        "3: .isatty",
        "4: .is_terminal",
        "5: typer.confirm()",
        "6: input()",
        "7: console.input()",
        "8: import click.confirm",
        "9: import typer.prompt",
        "10: confirm()",
        "11: ask()",
    ]
