"""The help and the README describe the CLI that exists.

Every command has help; every option and argument has help; every command and every option
group (Rich help panel) is in README.md with all its options; every `sbdlq ...` line in the
README's code blocks parses against the real command tree; the README opens with the two
commands CI relies on.
"""

import re
import shlex
import warnings
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from sbdlq.cli.main import app
from sbdlq.selection import SELECTION_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI = typer.main.get_command(app)


def walk(cmd: click.Command, path: tuple[str, ...] = ("sbdlq",)) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from walk(sub, (*path, name))


COMMANDS = list(walk(CLI))
IDS = [" ".join(p) for p, _ in COMMANDS]


def visible_params(cmd: click.Command) -> list[click.Parameter]:
    return [p for p in cmd.params if not getattr(p, "hidden", False)]


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_every_command_has_help(path: tuple[str, ...], cmd: click.Command) -> None:
    assert (cmd.help or "").strip(), f"`{' '.join(path)}` has no help text"
    assert cmd.get_short_help_str().strip(), f"`{' '.join(path)}` has no short help"


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_every_option_and_argument_has_help(path: tuple[str, ...], cmd: click.Command) -> None:
    missing = [p.name for p in visible_params(cmd) if not (getattr(p, "help", None) or "").strip()]
    hint = ""
    if any(isinstance(p, click.Argument) for p in cmd.params if p.name in missing):
        # typer<0.25 sets TyperArgument.help before calling click.Argument.__init__, which from
        # click 8.5 takes `help` itself and resets it: typer.Argument(help=...) is then lost.
        hint = f" (click {version('click')}: with typer<0.25, typer.Argument(help=...) needs click<8.5)"
    assert not missing, f"`{' '.join(path)}`: no help for {', '.join(missing)}{hint}"


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_every_help_page_renders(path: tuple[str, ...], cmd: click.Command) -> None:
    result = CliRunner().invoke(app, [*path[1:], "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr
    assert f"Usage: {' '.join(path)}" in result.stdout


@pytest.mark.parametrize(("path", "cmd"), COMMANDS[1:], ids=IDS[1:])
def test_every_command_is_in_the_readme(path: tuple[str, ...], cmd: click.Command) -> None:
    assert re.search(rf"(?<![\w-]){re.escape(' '.join(path))}(?![\w-])", README), (
        f"README.md never mentions `{' '.join(path)}`"
    )


def panels() -> dict[str, set[str]]:
    """Rich help panel → the long option names in it, across every command."""
    found: dict[str, set[str]] = {}
    for _, cmd in COMMANDS:
        for p in visible_params(cmd):
            panel = getattr(p, "rich_help_panel", None)
            if panel and isinstance(p, click.Option):
                found.setdefault(panel, set()).update(o for o in p.opts if o.startswith("--"))
    return found


PANELS = panels()
HEADINGS = [line.lstrip("#").strip().lower() for line in README.splitlines() if line.startswith("#")]


def test_option_groups_exist() -> None:
    assert {"Target", "Diagnostics", "Selection", "Output"} <= set(PANELS)


@pytest.mark.parametrize("panel", sorted(PANELS))
def test_every_option_group_is_a_readme_section(panel: str) -> None:
    assert any(panel.lower() in heading for heading in HEADINGS), f"README.md has no heading for the {panel} options"
    missing = sorted(o for o in PANELS[panel] if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", README))
    assert not missing, f"README.md lacks {panel} options: {', '.join(missing)}"


def test_readme_opens_with_the_two_commands() -> None:
    first = re.search(r"```bash\n(.*?)```", README, re.S)
    assert first is not None
    commands = [line for line in first.group(1).splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2, commands
    install, tests = commands
    assert install.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install . && ")
    assert "sbdlq emulator demo" in install
    assert tests.startswith('python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test')
    assert tests.endswith("python -m pytest -q -n 8")


def readme_invocations() -> list[list[str]]:
    """Every `sbdlq ...` in the README's bash blocks, split as a shell would, up to a pipe or `;`."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words: list[str] = []
            for token in [*lexer, ";"]:
                if token and set(token) <= set("|&;<>()"):
                    # `sbdlq`, or its full path as crontab lines give it ($HOME/.local/bin/sbdlq)
                    named = [i for i, w in enumerate(words) if w == "sbdlq" or w.endswith("/bin/sbdlq")]
                    if named:
                        found.append(words[named[0] + 1 :])
                    words = []
                else:
                    words.append(token)
    return found


INVOCATIONS = readme_invocations()


def test_readme_has_examples() -> None:
    assert len(INVOCATIONS) >= 15


@pytest.mark.parametrize("args", INVOCATIONS, ids=[" ".join(a) for a in INVOCATIONS])
def test_readme_examples_parse(args: list[str]) -> None:
    """Each example names real commands and options with valid values (nothing is run)."""
    ctx = CLI.make_context("sbdlq", list(args))
    cmd: click.Command = CLI
    while isinstance(cmd, click.Group) and (rest := _unparsed(ctx)):
        name, sub, rest = cmd.resolve_command(ctx, rest)
        assert sub is not None, f"no command {name!r} in `sbdlq {' '.join(args)}`"
        ctx = sub.make_context(name or "", rest, parent=ctx)
        cmd = sub
    assert not isinstance(cmd, click.Group), f"`sbdlq {' '.join(args)}` stops at a group"


def _unparsed(ctx: click.Context) -> list[str]:
    """The words a group left for its sub-command (click keeps the first one apart)."""
    with warnings.catch_warnings():
        # click 8.2+ deprecates protected_args in favour of a future `args` that holds all of them.
        warnings.simplefilter("ignore", DeprecationWarning)
        return [*ctx.protected_args, *ctx.args]


SELECTING = [(p, c) for p, c in COMMANDS if any(getattr(q, "rich_help_panel", None) == "Selection" for q in c.params)]


@pytest.mark.parametrize(("path", "cmd"), SELECTING, ids=[" ".join(p) for p, _ in SELECTING])
def test_a_command_that_selects_takes_every_selection_option(path: tuple[str, ...], cmd: click.Command) -> None:
    taken = {o for p in cmd.params for o in getattr(p, "opts", ())}
    assert [o.flag for o in SELECTION_OPTIONS if o.flag not in taken] == [], " ".join(path)


def test_the_readme_selection_section_lists_the_declared_options() -> None:
    section = README.split("### Selection", 1)[1].split("\n#", 1)[0]
    missing = [o.flag for o in SELECTION_OPTIONS if not re.search(rf"`{re.escape(o.flag)}[ `]", section)]
    assert missing == []


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_every_command_help_ends_with_examples_that_parse(path: tuple[str, ...], cmd: click.Command) -> None:
    """2-3 examples of this very command end its --help (as gh and az show them), each one valid;
    the groups' too, `sbdlq --help` included (issue 38)."""
    result = CliRunner().invoke(app, [*path[1:], "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    tail = result.stdout.rsplit("Examples:", 1)
    assert len(tail) == 2, f"`{' '.join(path)} --help` has no examples"
    shown = [line.strip().removeprefix("$ ") for line in tail[1].splitlines() if line.strip()]
    assert 2 <= len(shown) <= 3, shown
    for line in shown:
        words = shlex.split(line)
        args = words[words.index("sbdlq") + 1 :]
        assert f" {' '.join(path[1:])} ".replace("  ", " ") in f" {' '.join(args)} ", line
        test_readme_examples_parse(args)
