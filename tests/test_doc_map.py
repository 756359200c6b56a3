"""The map is true: every module, package and test the docs name exists (issue 39).

ARCHITECTURE.md, docs/DESIGN.md, the user's docs (README.md and the docs/ pages: the safety
page's table names the tests that prove each promise) and the package docstrings
(`sbdlq/**/__init__.py`) name the code's rooms. A name is `something.py` (in backticks, in a
list or in a tree drawing) or a backticked `pkg/`; it exists when a file or folder of the
repository ends with that path (`engine/core.py`, `core.py` beside the folder it is listed
under). A backticked `test_name` is a test function of tests/, and `..._suffix` the end of one.
A room or test renamed or removed without its docs fails here.
"""

from __future__ import annotations

import ast
import re
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


#: a placeholder in a path (`backends/NAME.py`, `NAME_cmd.py`): a pattern for a new room, not a room
PLACEHOLDER = re.compile(r"[A-Z]{2,}(?![a-z])")


def named_paths(text: str) -> set[str]:
    """The module and folder paths a text names (a leading `sbdlq/` dropped: names are suffixes)."""
    names = set(MODULE.findall(text)) | set(FOLDER.findall(text))
    return {name.removeprefix("sbdlq/") for name in names if not PLACEHOLDER.search(name)} - NOT_CODE


def exists(name: str) -> bool:
    """Whether a file or folder of the repository ends with the path `name`."""
    pool = FOLDERS if name.endswith("/") else FILES
    return any(path.endswith("/" + name) for path in pool)


@pytest.mark.parametrize(("where", "text"), DOCS, ids=[where for where, _ in DOCS])
def test_every_module_the_docs_name_exists(where: str, text: str) -> None:
    assert sorted(name for name in named_paths(text) if not exists(name)) == []


def test_the_check_sees_what_it_looks_for() -> None:
    # A checker that saw nothing would pass forever: bare, backticked, in a tree, and folders.
    text = "`cli/main.py` and main.py\n  paths.py        names\n`emulator/engine/` and `nowhere/`, `NAME_cmd.py`"
    assert named_paths(text) == {"cli/main.py", "main.py", "paths.py", "emulator/engine/", "nowhere/"}
    assert exists("cli/main.py") and exists("engine/core.py") and exists("emulator/engine/")
    assert not exists("paths.py") and not exists("nowhere/") and not exists("cli/core.py")
    assert len(DOCS) > 3


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
