"""The map is true: every module and package the docs name exists (issue 39).

ARCHITECTURE.md, docs/DESIGN.md and the package docstrings (`sbdlq/**/__init__.py`) name the
code's rooms. A name is `something.py` (in backticks, in a list or in a tree drawing) or a
backticked `pkg/`; it exists when a file or folder of the repository ends with that path
(`engine/core.py`, `core.py` beside the folder it is listed under). A room renamed or removed
without its docs fails here.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache"}
#: Folders the docs name that are not the code's: the user state dir's and the workspace's.
NOT_CODE = frozenset({"servers/", "tls/", "locks/", "shared/reference/", "shared/seeds/"})

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
    """(where, text) for ARCHITECTURE.md, docs/DESIGN.md and every package docstring."""
    for name in ("ARCHITECTURE.md", "docs/DESIGN.md"):
        yield name, (ROOT / name).read_text(encoding="utf-8")
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
