"""Running the README's and the docs pages' bash blocks for real: find them by section, run
them as a user would.

The user's documentation is README.md and the pages under docs/ it links (`PAGES`); a section
is found by its heading in whichever page holds it. docs/DESIGN.md, the contract, is not a page
of it here.

Crontab lines (five schedule fields, or `NAME=value`) run as cron runs them: `run_block`.

A block runs in one `bash` session with `pipefail`, line by line: after each line the script
stops unless the line exited 0 (the README's `; echo "exit $?"` lines show a status and so exit
0 themselves). It runs the current venv's `sbdlq` (first on PATH), with the cwd and a fresh
emulator store (SBDLQ_EMULATOR) in a temp dir and the environment of support.cli.isolated_env.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from .cli import isolated_env

ROOT = Path(__file__).resolve().parent.parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: The pages of docs/ that are not the user's documentation: the contract, checked by its own tests.
NOT_USER_DOCS = frozenset({"docs/DESIGN.md"})
#: The user's documentation, by path from the repository root: README.md first, then docs/*.md.
PAGES: dict[str, str] = {
    "README.md": README,
    **{
        f"docs/{page.name}": page.read_text(encoding="utf-8")
        for page in sorted((ROOT / "docs").glob("*.md"))
        if f"docs/{page.name}" not in NOT_USER_DOCS
    },
}
#: How long one block may run (each takes a few seconds on a quiet machine).
BLOCK_TIMEOUT_S = 120
#: The user's config file, under HOME (XDG_CONFIG_HOME is HOME/.config here).
USER_CONFIG = Path(".config", "sbdlq", "config.yaml")
#: What a failing line prints on stderr before the script stops.
FAILED = "readme-line-failed"


class Block(NamedTuple):
    """One ```bash block: the label of the paragraph that introduces it, and its lines."""

    label: str
    lines: list[str]


def headings(text: str) -> list[str]:
    """The heading lines of a Markdown text (`## Recipes`), not those in code blocks."""
    found, in_code = [], False
    for line in text.splitlines():
        in_code ^= line.startswith("```")
        hashes = len(line) - len(line.lstrip("#"))
        if not in_code and hashes > 0 and line[hashes : hashes + 1] == " ":
            found.append(line)
    return found


def page_of(heading: str) -> str:
    """The one page (`README.md`, `docs/routing.md`) that has the heading line `heading`."""
    pages = [name for name, text in PAGES.items() if heading in headings(text)]
    assert len(pages) == 1, f"the heading {heading!r} is in {pages or 'no page'} of the docs, not in one"
    return pages[0]


def section(heading: str) -> str:
    """The text from `heading` to the next heading of its level or higher (not in code), in the
    page that has it."""
    level = len(heading.split(" ")[0])
    lines = PAGES[page_of(heading)].splitlines(keepends=True)
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
    if (tmp / "home" / USER_CONFIG).exists():
        env.pop("SBDLQ_CONFIG")  # the test wrote the user's config file: found where sbdlq looks
    # sys.executable is the venv's python; its directory (not resolved: a venv symlinks
    # python) holds the sbdlq console script of the package under test.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if (tmp / "stand-ins").is_dir():
        env["PATH"] += os.pathsep + str(tmp / "stand-ins")  # last: a real tool of that name wins
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


# ---------------------------------------------------------------------- crontab lines

#: A crontab line: five schedule fields, then the command /bin/sh runs.
CRON_LINE = re.compile(r"^(?:[\d*/,-]+\s+){5}(?P<command>\S.*)$")
#: A crontab variable: `NAME=value` sets it for the lines after it (no shell expansion).
CRON_VARIABLE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\S*)$")
#: A line that runs until Ctrl-C: `count --watch` without `--fail-above`.
UNTIL_CTRL_C = re.compile(r"--watch\b")
#: The PATH cron gives a command.
CRON_PATH = "/usr/bin:/bin"
#: Where a crontab line finds sbdlq: its full path after `pipx install sbdlq`, as README writes it.
PIPX_SBDLQ = Path(".local", "bin", "sbdlq")
#: The commands a reader supplies (mail, page-oncall): stand-ins that log their arguments.
STAND_INS = ("mail", "page-oncall")


def install_like_a_user(tmp: Path) -> Path:
    """HOME with sbdlq where pipx puts it (the venv's console script), and the stand-ins' folder."""
    home = tmp / "home"
    (home / PIPX_SBDLQ).parent.mkdir(parents=True, exist_ok=True)
    if not (home / PIPX_SBDLQ).exists():
        (home / PIPX_SBDLQ).symlink_to(Path(sys.executable).parent / "sbdlq")
    stand_ins = tmp / "stand-ins"
    stand_ins.mkdir(exist_ok=True)
    for name in STAND_INS:
        tool = stand_ins / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> "$HOME/stand-ins.log"\ncat >/dev/null\n')
        tool.chmod(0o755)
    return home


def run_cron(command: str, tmp: Path, variables: dict[str, str]) -> Run:
    """One crontab command as cron runs it: /bin/sh -c in HOME, PATH=/usr/bin:/bin, `\\%` read as `%`.

    Only the stand-ins are added (after cron's PATH), and PYTHONPATH when set, so the
    package under test is the one that runs.
    """
    home = install_like_a_user(tmp)
    env = {"HOME": str(home), "LOGNAME": "cron", "SHELL": "/bin/sh", **variables}
    env["PATH"] = f"{CRON_PATH}:{tmp / 'stand-ins'}"
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    proc = subprocess.run(
        ["/bin/sh", "-c", command.replace("\\%", "%")],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def run_block(lines: list[str], tmp: Path, *, directories: dict[str, Path] | None = None) -> Run:
    """A recipe block: crontab lines as cron runs them, a `--watch` line until its first output and
    then Ctrl-C, the other lines in one bash session each run.

    `directories` stands in for a crontab variable's value (`BACKUPS=/var/backups/dlq`), as a
    reader sets it to a directory of theirs; every other line runs as written.
    """
    variables: dict[str, str] = {}
    runs: list[Run] = []
    shell: list[str] = []

    def flush() -> None:
        if shell:
            runs.append(run_lines(list(shell), tmp))
            shell.clear()

    for line in lines:
        if UNTIL_CTRL_C.search(line) and "--fail-above" not in line:
            flush()
            appended = re.search(r">>\s*(\S+)", line)
            interrupted = run_until_interrupted(line, tmp, output=tmp / appended[1] if appended else None)
            # Ended by Ctrl-C as the recipe says (130): that is its success.
            runs.append(interrupted._replace(returncode=0 if interrupted.returncode == 130 else interrupted.returncode))
        elif (variable := CRON_VARIABLE.match(line)) is not None:
            flush()
            given = (directories or {}).get(variable["name"])
            variables[variable["name"]] = str(given) if given is not None else variable["value"]
        elif (cron := CRON_LINE.match(line)) is not None:
            flush()
            runs.append(run_cron(cron["command"], tmp, variables))
        else:
            shell.append(line)
    flush()
    failed = next((r.returncode for r in runs if r.returncode), 0)
    return Run(failed, "".join(r.stdout for r in runs), "".join(r.stderr for r in runs))


def run_until_interrupted(line: str, tmp: Path, *, output: Path | None = None) -> Run:
    """A line that runs until Ctrl-C (`count --watch`): started, and interrupted as a person
    would once its first output is there (on stdout, or in `output` when it writes a file)."""
    install_like_a_user(tmp)
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-c", line],
        cwd=tmp,
        env=environment(tmp),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, so Ctrl-C reaches sbdlq under bash
    )
    assert proc.stdout is not None
    first = b""
    # A guard, not a measure: a line that shows nothing at all is interrupted after a block's time.
    give_up = time.monotonic() + BLOCK_TIMEOUT_S
    try:
        while proc.poll() is None and not first and time.monotonic() < give_up:
            if output is not None:
                if output.exists() and output.stat().st_size:
                    break
                select.select([], [], [], 0.05)
            elif select.select([proc.stdout], [], [], 0.05)[0]:
                first = os.read(proc.stdout.fileno(), 65536)
        os.killpg(proc.pid, signal.SIGINT)
        rest, err = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Run(proc.returncode, (first + rest).decode(), err.decode())
