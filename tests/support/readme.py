"""Running README.md's bash blocks for real: find them by section, run them as a user would.

A block runs in one `bash` session with `pipefail`, line by line: after each line the script
stops unless the line exited 0 (the README's `; echo "exit $?"` lines show a status and so exit
0 themselves). It runs the current venv's `sbdlq` (first on PATH), with the cwd and a fresh
emulator store (SBDLQ_EMULATOR) in a temp dir and the environment of support.cli.isolated_env.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from .cli import isolated_env

ROOT = Path(__file__).resolve().parent.parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: How long one block may run (each takes a few seconds on a quiet machine).
BLOCK_TIMEOUT_S = 120
#: What a failing line prints on stderr before the script stops.
FAILED = "readme-line-failed"


class Block(NamedTuple):
    """One ```bash block: the label of the paragraph that introduces it, and its lines."""

    label: str
    lines: list[str]


def section(heading: str) -> str:
    """The README text from `heading` to the next heading of its level or higher (not in code)."""
    level = len(heading.split(" ")[0])
    lines = README.splitlines(keepends=True)
    start = lines.index(f"{heading}\n")
    in_code = False
    for end in range(start + 1, len(lines)):
        line = lines[end]
        in_code ^= line.startswith("```")
        hashes = len(line) - len(line.lstrip("#"))
        if not in_code and 0 < hashes <= level and line[hashes : hashes + 1] == " ":
            return "".join(lines[start:end])
    return "".join(lines[start:])


def bash_blocks(text: str) -> list[Block]:
    """Every ```bash block of `text`, labelled by its paragraph (up to its first `:` or ` (`)."""
    blocks = []
    for match in re.finditer(r"((?:^(?!```)[^\n]+\n)+)\n```bash\n([\s\S]*?)```", text, re.M):
        paragraph = " ".join(match.group(1).split())
        label = re.split(r":| \(", paragraph, maxsplit=1)[0]
        if len(label) > 50:
            label = label[:50].rsplit(" ", 1)[0]
        lines = [line for line in match.group(2).splitlines() if line.strip()]
        blocks.append(Block(label, lines))
    return blocks


class Run(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def environment(tmp: Path) -> dict[str, str]:
    """The process environment: isolated (no SBDLQ_* of the user's), the venv's sbdlq first."""
    env = dict(os.environ)
    for name, value in isolated_env(tmp / "home").items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env["SBDLQ_EMULATOR"] = str(tmp / "emulator.db")
    # sys.executable is the venv's python; its directory (not resolved: a venv symlinks
    # python) holds the sbdlq console script of the package under test.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def script(lines: list[str]) -> str:
    """The lines as a bash script that stops at the first line exiting non-zero."""
    out = ["set -o pipefail"]
    for n, line in enumerate(lines, 1):
        out.append(line)
        report = f'printf "{FAILED}: line {n} exited %d: %s\\n" $rc {shlex.quote(line)} >&2'
        out.append(f"rc=$?; if [ $rc -ne 0 ]; then {report}; exit 97; fi")
    return "\n".join(out) + "\n"


def run_lines(lines: list[str], tmp: Path) -> Run:
    """Run the lines in one bash session in `tmp` (a fresh store and HOME inside it)."""
    (tmp / "home").mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc"],
        input=script(lines),
        cwd=tmp,
        env=environment(tmp),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)
