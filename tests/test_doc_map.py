"""The map is true: every module, package and test the docs name exists (issue 39).

ARCHITECTURE.md, docs/DESIGN.md, the user's docs (README.md and the docs/ pages: the safety
page's table names the tests that prove each promise), the package docstrings and every
docstring and comment of sbdlq/, tests/ and benchmarks/ name the code's rooms. Each check is
strict about where a name is written:

- a path (`something.py`, a backticked `pkg/`) is resolved where it is named: against the
  folder of the path named before it in its table row or paragraph, the row's first path, a
  tree drawing's folder above it (by indent), or the folder of the file a docstring is in;
  then sbdlq/ and the root. `run.py` in the row of `operations/` is operations/run.py, so a
  run.py elsewhere does not keep it alive;
- a retired module's name (`run_inline`, `apply_cmd`, `model`, `paths.py`, ...) is used nowhere
  but CHANGELOG.md, the history;
- `module.attribute` (`addresses.send_target`) names an attribute the module has;
- a bare list of modules ("entities, router, inserts, locks, upkeep") names only modules of
  the folder most of them are in.

A backticked `test_name` is a test function of tests/, and `..._suffix` the end of one.
A room or test renamed or removed without its docs fails here.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.readme import PAGES

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache"}
#: Paths the docs name that are not the code's: the user state dir's, the workspace's, and a
#: reader's own script (docs/tls.md's `python my_admin_app.py`).
NOT_CODE = frozenset({"servers/", "tls/", "locks/", "shared/reference/", "shared/seeds/", "my_admin_app.py"})

#: `name.py` with an optional folder path before it, anywhere (lists and tree drawings name modules bare).
MODULE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*\w+\.py)\b")
#: a backticked folder: `pkg/`, `emulator/engine/`, `tests/contract/`
FOLDER = re.compile(r"`((?:[\w-]+/)+)`")


def _paths() -> tuple[set[str], set[str]]:
    """Every file and folder of the repository, as `/`-prefixed relative paths (for suffix matching)."""
    files, folders = set(), set()
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if SKIPPED_DIRS & set(parts):
            continue
        (folders if path.is_dir() else files).add("/" + "/".join(parts) + ("/" if path.is_dir() else ""))
    return files, folders


FILES, FOLDERS = _paths()


def _docs() -> Iterator[tuple[str, str]]:
    """(where, text) for ARCHITECTURE.md, docs/DESIGN.md, the user's docs and every package docstring."""
    for name in ("ARCHITECTURE.md", "docs/DESIGN.md"):
        yield name, (ROOT / name).read_text(encoding="utf-8")
    yield from PAGES.items()
    for init in sorted((ROOT / "sbdlq").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        yield str(init.relative_to(ROOT)), doc


DOCS = list(_docs())


#: a private module of a library (the SDK's `_common/constants.py`): sbdlq names none of its own so
PRIVATE = re.compile(r"(?:^|/)_[a-z]")
#: a placeholder in a path (`backends/NAME.py`, `NAME_cmd.py`): a pattern for a new room, not a room
PLACEHOLDER = re.compile(r"[A-Z]{2,}(?![a-z])")


def named_paths(text: str) -> set[str]:
    """The module and folder paths a text names, as written (placeholders and NOT_CODE left out)."""
    return {name for _, name in _names_in_order(text)}


def _names_in_order(text: str) -> list[tuple[int, str]]:
    """(offset, name) of each module or folder path the text names, in the order written."""
    found = [(m.start(1), m.group(1)) for m in MODULE.finditer(text)]
    found += [(m.start(1), m.group(1)) for m in FOLDER.finditer(text)]
    return sorted(
        (at, name)
        for at, name in found
        if not PLACEHOLDER.search(name) and name not in NOT_CODE and not PRIVATE.search(name)
    )


def _real(path: str) -> bool:
    return ("/" + path) in (FOLDERS if path.endswith("/") else FILES)


def _chain(folder: str) -> list[str]:
    """A folder and each of its parents, nearest first."""
    chain = []
    while folder:
        chain.append(folder)
        folder = folder.rpartition("/")[0]
    return chain


def resolve(name: str, *contexts: str) -> str | None:
    """The repository path `name` means where it is written: under the first of the folders
    `contexts` (or one of their parents) that holds it, else under sbdlq/ or the root; None
    when nothing does. A bare `run.py` in the row of `operations/` must be
    sbdlq/operations/run.py: another folder's run.py is not what the row names."""
    folders = [folder for context in contexts for folder in _chain(context.rstrip("/"))]
    candidates = [f"{folder}/{name}" for folder in folders] + [f"sbdlq/{name.removeprefix('sbdlq/')}", name]
    return next((path for path in candidates if _real(path)), None)


def _folder_of(path: str) -> str:
    return path.rstrip("/") if path.endswith("/") else path.rpartition("/")[0]


#: a tree drawing's entry: a folder at its indent (`  emulator/`, `    engine/  Service Bus ...`)
TREE_FOLDER = re.compile(r"^([ │├└─]*)([\w-]+/)(?:\s|$)")


def _units(where: str, text: str) -> Iterator[tuple[list[str], str]]:
    """(the folders a unit sits in, the unit) for each line of a tree drawing and each table
    row or paragraph of the rest. A tree line sits in the folders drawn above it at a smaller
    indent; a package docstring sits in its package."""
    base = str(Path(where).parent) if where.endswith(".py") else "sbdlq"
    blocks = re.split(r"^```.*$", text, flags=re.M)
    for index, block in enumerate(blocks):
        if index % 2 == 0:
            for unit in re.split(r"\n\s*\n|\n(?=\|)", block):
                yield [base], unit
            continue
        stack: list[tuple[int, str]] = []  # (indent, folder path)
        for line in block.splitlines():
            indent = len(line) - len(line.lstrip(" │├└─"))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            entry = TREE_FOLDER.match(line)
            parent = stack[-1][1] if stack else ""
            if entry and not stack and entry.group(2) == "sbdlq/":
                stack.append((indent, "sbdlq"))
            elif entry:
                path = resolve(entry.group(2), parent or base)
                stack.append((indent, _folder_of(path) if path else f"{parent}/{entry.group(2)}".strip("/")))
            yield ([stack[-1][1]] if stack else [base]), line


def _resolved(where: str, text: str) -> Iterator[tuple[str, str | None]]:
    """(name, the repository path it means or None) for each path a document names: each
    against the folder of the path named before it in its row or paragraph, then the unit's first."""
    for contexts, unit in _units(where, text):
        last: list[str] = []
        for _, name in _names_in_order(unit):
            path = resolve(name, *last, *contexts)
            yield name, path
            if path is None:
                continue
            if not last:
                contexts = [_folder_of(path), *contexts]
            last = [_folder_of(path)]


def stale_paths(where: str, text: str) -> list[str]:
    """The paths a document names that resolve to nothing where they are named."""
    return [name for name, path in _resolved(where, text) if path is None]


@pytest.mark.parametrize(("where", "text"), DOCS, ids=[where for where, _ in DOCS])
def test_every_module_the_docs_name_exists(where: str, text: str) -> None:
    assert sorted(set(stale_paths(where, text))) == []


#: a backticked test function, `test_name`, or the end of one's name, `..._makes_no_file`
TEST_NAME = re.compile(r"`(test_\w+|\.\.\._\w+)`")
#: every test function of tests/, by name
TESTS = {
    match
    for path in (ROOT / "tests").rglob("test_*.py")
    for match in re.findall(r"^\s*(?:async )?def (test_\w+)\(", path.read_text(encoding="utf-8"), re.M)
}


def names_a_test(name: str) -> bool:
    """Whether a test function of tests/ is `name`, or ends with it when it starts `...`."""
    if name.startswith("..."):
        return any(test.endswith(name[3:]) for test in TESTS)
    return name in TESTS


@pytest.mark.parametrize(("where", "text"), DOCS, ids=[where for where, _ in DOCS])
def test_every_test_the_docs_name_exists(where: str, text: str) -> None:
    assert sorted(name for name in TEST_NAME.findall(text) if not names_a_test(name)) == []


def test_the_test_check_sees_what_it_looks_for() -> None:
    text = "`test_every_module_the_docs_name_exists`, (`..._sees_what_it_looks_for`) and `test_nowhere_at_all`"
    assert TEST_NAME.findall(text) == [
        "test_every_module_the_docs_name_exists",
        "..._sees_what_it_looks_for",
        "test_nowhere_at_all",
    ]
    assert names_a_test("test_every_module_the_docs_name_exists") and names_a_test("..._sees_what_it_looks_for")
    assert not names_a_test("test_nowhere_at_all") and not names_a_test("..._nowhere_at_all")
    assert len([name for _, doc in DOCS for name in TEST_NAME.findall(doc)]) >= 5


def _source_notes(path: Path) -> str:
    """Every docstring and comment of a Python file, one paragraph each."""
    source = path.read_text(encoding="utf-8")
    notes = [
        ast.get_docstring(node, clean=False) or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    notes += [token.string.lstrip("#").strip() for token in tokens if token.type == tokenize.COMMENT]
    return "\n\n".join(note for note in notes if note)


#: every docstring and comment of the code, tests and benchmarks, by file
NOTES = {
    str(path.relative_to(ROOT)): _source_notes(path)
    for folder in ("sbdlq", "tests", "benchmarks", "completions")
    for path in sorted((ROOT / folder).rglob("*.py"))
    if not SKIPPED_DIRS & set(path.parts) and path != Path(__file__)
}


@pytest.mark.parametrize("where", sorted(NOTES))
def test_every_module_a_docstring_or_comment_names_exists(where: str) -> None:
    # A docstring or comment names paths from its own folder: `core.py` in engine/ is engine's.
    assert sorted(set(stale_paths(where, NOTES[where]))) == []


#: Names of modules retired by issue 39 and before it, which no doc, docstring or comment may use
#: any more (CHANGELOG.md, the history, is not read): each unlike any word of prose, so seen anywhere.
RETIRED_WORDS = frozenset(
    {
        "run_inline",
        "apply_cmd",
        "routing_cmds",
        "copy_cmds",
        "config_cmds",
        "emulator_cmds",
        "spread_cmds",
        "ui_cmd",
        "render_prometheus",
        "output_formats",
        "test_ui_cmd",
        "test_routing_cmds",
        "test_wire_repair",
    }
)
#: Retired module names that are also words (`model`, `paths`): stale backticked or before a
#: `.attribute`; as files (`paths.py`) the path check sees them.
RETIRED_MODULES = RETIRED_WORDS | {"paths", "runs", "common", "model", "files", "network", "renewal", "wire"}


def retired_names(text: str) -> list[str]:
    """The retired module names a text still uses."""
    words = re.findall(r"\b(?:" + "|".join(sorted(RETIRED_WORDS)) + r")\b", text)
    quoted = [name for name in re.findall(r"`([\w.]+)`", text) if name.split(".")[0] in RETIRED_MODULES]
    return sorted({*words, *quoted})


ALL_TEXTS = {**dict(DOCS), **NOTES}


@pytest.mark.parametrize("where", sorted(ALL_TEXTS))
def test_no_doc_docstring_or_comment_names_a_retired_module(where: str) -> None:
    assert retired_names(ALL_TEXTS[where]) == []


def _top_level_names(path: Path) -> set[str]:
    """The names a module defines or imports at its top level (a package: its modules too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
    if path.name == "__init__.py":
        names |= {child.stem if child.is_file() else child.name for child in path.parent.iterdir()}
    return names


def _module_attributes() -> dict[str, set[str]]:
    """Each of sbdlq's (and benchmarks') module names (`routing_check`, `formats`, a package's `backends`), with
    every attribute any module of that name has."""
    attributes: dict[str, set[str]] = {}
    for path in [*(ROOT / "sbdlq").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        name = path.parent.name if path.name == "__init__.py" else path.stem
        if "__pycache__" not in path.parts and name != "__main__":
            attributes.setdefault(name, set()).update(_top_level_names(path))
    # A name that is also the standard library's (`http`, `signal`) is read as the library's.
    return {name: names for name, names in attributes.items() if name not in sys.stdlib_module_names}


MODULE_ATTRIBUTES = _module_attributes()
#: `module.attribute` in prose (`addresses.send_target`, `frame_repair.DeliveryIdRepair`), not a
#: part of a longer dotted name (`azure.servicebus.aio`), a decorator (`@app.command`) nor a file name
DOTTED = re.compile(r"(?<![\w./@-])([a-z_][a-z0-9_]*)\.([A-Za-z_]\w*)\b(?!\.\w|/)")
FILE_ENDINGS = frozenset({"py", "md", "json", "jsonl", "yaml", "yml", "toml", "txt", "sh", "svg", "pem", "ini", "cfg"})


def stale_attributes(text: str) -> list[str]:
    """The `module.attribute` references of a text whose module is retired or has no such attribute."""
    stale = []
    for module, attribute in DOTTED.findall(text):
        if attribute in FILE_ENDINGS:
            continue
        known = MODULE_ATTRIBUTES.get(module)
        if (known is None and module in RETIRED_MODULES) or (known is not None and attribute not in known):
            stale.append(f"{module}.{attribute}")
    return stale


#: The texts that name sbdlq's attributes: the user's pages are left out, their code samples
#: call the reader's own objects (`admin.create_queue`, an SDK client).
CODE_TEXTS = {where: text for where, text in ALL_TEXTS.items() if where not in PAGES}


#: a dotted name from the top of the package: `sbdlq.cli.main`, `sbdlq.errors.BadInput`
QUALIFIED = re.compile(r"(?<![\w./-])sbdlq(?:\.\w+)+")


def stale_qualified(text: str) -> list[str]:
    """The `sbdlq.a.b` names of a text that no import could reach: each part a package, a
    module, or (the first that is neither) an attribute of the module before it."""
    stale = []
    for dotted in QUALIFIED.findall(text):
        folder, parts = ROOT / "sbdlq", dotted.split(".")[1:]
        module = folder / "__init__.py"
        for part in parts:
            if (folder / part / "__init__.py").exists():
                folder = folder / part
                module = folder / "__init__.py"
            elif (folder / f"{part}.py").exists() and module.name == "__init__.py":
                module = folder / f"{part}.py"
            else:
                if part not in _top_level_names(module):
                    stale.append(dotted)
                break
    return stale


@pytest.mark.parametrize("where", sorted(CODE_TEXTS))
def test_every_module_attribute_the_docs_name_exists(where: str) -> None:
    assert stale_attributes(CODE_TEXTS[where]) + stale_qualified(CODE_TEXTS[where]) == []


def _modules_by_folder() -> dict[str, set[str]]:
    """The module names of each folder of sbdlq (a file's stem, a package's folder name)."""
    folders: dict[str, set[str]] = {}
    for path in (ROOT / "sbdlq").rglob("*"):
        if "__pycache__" in path.parts or path.name.startswith("__"):
            continue
        if path.suffix == ".py" or (path / "__init__.py").exists():
            folders.setdefault(str(path.parent.relative_to(ROOT)), set()).add(path.stem)
    return folders


MODULES_BY_FOLDER = _modules_by_folder()
#: a run of three or more bare names, "a, b, c" or "a, b, and c" (the modules beside this one)
BARE_LIST = re.compile(r"(?<![\w`./-])[a-z_][a-z0-9_]*(?:,\s+(?:and\s+)?[a-z_][a-z0-9_]*){2,}(?![\w`./-])")


def stale_module_lists(text: str) -> list[str]:
    """The names of a bare list of modules (most of them modules of one folder) that are not
    modules of that folder: "(entities, routing, inserts, locks, upkeep)" in emulator/engine/,
    where the fan-out is `router`."""
    stale = []
    for match in BARE_LIST.finditer(text):
        names = re.split(r",\s+(?:and\s+)?", match.group(0))
        if re.match(r" [a-z]", text[match.end() :]):
            names.pop()  # "resubmit, purge, replay, their twins": the last word begins a phrase
        modules = max(MODULES_BY_FOLDER.values(), key=lambda folder: len(folder.intersection(names)))
        if len(modules.intersection(names)) >= max(3, len(names) // 2 + 1):
            stale += [name for name in names if name not in modules]
    return stale


@pytest.mark.parametrize("where", sorted(CODE_TEXTS))
def test_every_bare_list_of_modules_names_modules(where: str) -> None:
    assert stale_module_lists(CODE_TEXTS[where]) == []


def test_the_check_sees_what_it_looks_for() -> None:
    # A checker that saw nothing would pass forever: bare, backticked, in a tree, and folders.
    text = "`cli/main.py` and main.py\n  paths.py        names\n`emulator/engine/` and `nowhere/`, `NAME_cmd.py`"
    assert named_paths(text) == {"cli/main.py", "main.py", "paths.py", "emulator/engine/", "nowhere/"}
    assert resolve("cli/main.py", "sbdlq") == "sbdlq/cli/main.py"
    assert resolve("core.py", "sbdlq/emulator/engine") == "sbdlq/emulator/engine/core.py"
    assert resolve("paths.py", "sbdlq") is None and resolve("nowhere/", "sbdlq") is None
    assert len(DOCS) > 3 and len(NOTES) > 100


@pytest.mark.parametrize(
    ("where", "text", "stale"),
    [
        # a bare name is its row's: config.py and run.py exist elsewhere, never in operations/
        ("ARCHITECTURE.md", "| `operations/` | `browse.py`, `run.py` (loop), `config.py` |", ["run.py", "config.py"]),
        ("ARCHITECTURE.md", "| `cli/` | `main.py`, `common.py` (run) |", ["common.py"]),
        # ...and its paragraph's: after cli/commands/dlq.py, routing.py is cli/commands/routing.py
        ("ARCHITECTURE.md", "`cli/commands/dlq.py`, `routing.py`", []),
        ("ARCHITECTURE.md", "the loop, `operations/move.py`, and the check, `routing.py`", ["routing.py"]),
        # a tree drawing's name is its folder's, by indent
        ("docs/DESIGN.md", "```\nsbdlq/\n  operations/\n    move.py\n    renewal.py\n  errors.py\n```", ["renewal.py"]),
        ("docs/DESIGN.md", "```\nsbdlq/\n  emulator/\n    engine/  rules (core.py,\n    files.py)\n```", ["files.py"]),
        # a docstring's or comment's bare name is its own folder's
        ("sbdlq/operations/resubmit.py", "the loop of run.py and move.py", ["run.py"]),
        ("sbdlq/emulator/engine/core.py", "see cli/message_table.py", ["cli/message_table.py"]),
    ],
)
def test_a_name_that_exists_elsewhere_is_stale_where_it_is_named(where: str, text: str, stale: list[str]) -> None:
    assert stale_paths(where, text) == stale


def test_the_retired_and_dotted_checks_see_stale_names() -> None:
    text = "imports run_inline and `model`; see `apply_cmd` and `paths.send_target`"
    assert retired_names(text) == ["apply_cmd", "model", "paths.send_target", "run_inline"]
    assert retired_names("a model of the broker; the `routing` check") == []
    assert stale_attributes("(see routing.check_destination), paths.send_target and wire.DeliveryIdRepair") == [
        "routing.check_destination",
        "paths.send_target",
        "wire.DeliveryIdRepair",
    ]
    assert stale_attributes("cli.message_table and common.run() and render_prometheus.render") == [
        "cli.message_table",
        "common.run",
        "render_prometheus.render",
    ]
    assert stale_qualified("sbdlq.model, sbdlq.cli.common.run and sbdlq.operations.run_inline") == [
        "sbdlq.model",
        "sbdlq.cli.common.run",
        "sbdlq.operations.run_inline",
    ]
    assert stale_qualified("sbdlq.cli.main.COMMANDS, sbdlq.errors.BadInput, sbdlq.emulator.engine") == []
    fine = "routing_check.check_destination, addresses.send_target, frame_repair.DeliveryIdRepair, main.COMMANDS"
    assert stale_attributes(fine + ", notes.py, azure.servicebus.aio, backends.open_backend") == []


def test_the_list_check_sees_a_module_that_is_not_beside_the_others() -> None:
    assert stale_module_lists("beside this one (entities, routing, inserts, locks,\nupkeep); each") == ["routing"]
    assert stale_module_lists("its parts: planning, renewal, retries, ratelimit, one each") == ["renewal"]
    assert stale_module_lists("(entities, router, inserts, locks, upkeep)") == []
    assert stale_module_lists("resubmit, purge, replay, their twins; red, green, blue") == []


def test_architecture_names_every_module() -> None:
    # The map names every room: a module of sbdlq/ that ARCHITECTURE.md never names (as a path
    # that resolves to it, or its package's folder named with its modules listed) is unmapped.
    named = {path for _, path in _resolved("ARCHITECTURE.md", dict(DOCS)["ARCHITECTURE.md"]) if path}
    modules = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "sbdlq").rglob("*.py")
        if "__pycache__" not in path.parts and not path.name.startswith("__")
    }
    assert sorted(modules - named) == []


#: a package docstring's list of its modules, one `- name.py  job` line each
LISTED_MODULE = re.compile(r"^- (\w+\.py)\b", re.M)


def unlisted_modules(package: Path, doc: str) -> list[str]:
    """The modules of a package its docstring's list leaves out (none when it keeps no list)."""
    listed = set(LISTED_MODULE.findall(doc))
    modules = {path.name for path in package.glob("*.py") if not path.name.startswith("__")}
    return sorted(modules - listed) if listed else []


@pytest.mark.parametrize("init", sorted((ROOT / "sbdlq").rglob("__init__.py")), ids=lambda p: str(p.parent.name))
def test_a_package_that_lists_its_modules_lists_every_one(init: Path) -> None:
    # backends/servicebus/ lists "one module per job": a module added without its line fails.
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    assert unlisted_modules(init.parent, doc) == []


def test_the_package_list_check_sees_a_module_left_out() -> None:
    servicebus = ROOT / "sbdlq" / "backends" / "servicebus"
    doc = "One module per job:\n\n- backend.py  the Backend\n- senders.py  the senders\n"
    assert {"peek_counts.py", "scheduling.py"} <= set(unlisted_modules(servicebus, doc))
    assert unlisted_modules(servicebus, "no list here") == []
