"""The help, the README and the docs pages describe the CLI that exists.

Every command has help; every option and argument has help; every command is in README.md;
every option group (Rich help panel) is a heading of the user's docs (README.md and the docs/
pages, support.readme.PAGES) with all its options; every `sbdlq ...` line in their code blocks
parses against the real command tree; the README opens with the two commands CI relies on;
the README links every docs/ page, and every link between the pages reaches its file and heading.
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
from support.readme import PAGES, README, ROOT, headings, section
from typer.testing import CliRunner

from sbdlq.cli.main import app
from sbdlq.selection import SELECTION_OPTIONS

#: Every page of the user's docs, as one text: where an option may be documented.
DOCS = "\n".join(PAGES.values())
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
HEADINGS = [line.lstrip("#").strip().lower() for text in PAGES.values() for line in headings(text)]


def test_option_groups_exist() -> None:
    assert {"Target", "Diagnostics", "Selection", "Output"} <= set(PANELS)


@pytest.mark.parametrize("panel", sorted(PANELS))
def test_every_option_group_is_a_readme_section(panel: str) -> None:
    assert any(panel.lower() in heading for heading in HEADINGS), f"no docs heading for the {panel} options"
    missing = sorted(o for o in PANELS[panel] if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", DOCS))
    assert not missing, f"the docs lack {panel} options: {', '.join(missing)}"


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
    """Every `sbdlq ...` in the bash blocks of the README and the docs pages, split as a shell
    would, up to a pipe or `;`."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", DOCS, re.S):
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
    # The README's own blocks are among them, and so are the pages' (a page's blocks seen too).
    assert ["emulator", "demo"] in INVOCATIONS and ["routing", "status", "checkout"] in INVOCATIONS


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
    text = section("## Selection")
    missing = [o.flag for o in SELECTION_OPTIONS if not re.search(rf"`{re.escape(o.flag)}[ `]", text)]
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


# ------------------------------------------------------------------ the pages and their links

#: A Markdown link or image: `[text](target)`, the target without a title.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def links(text: str) -> list[str]:
    """The targets of a page's links and images, outside code blocks and inline code."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return LINK.findall(prose)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading line: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line) for line in headings(path.read_text(encoding="utf-8"))}


def test_the_readme_links_every_docs_page() -> None:
    """Every page under docs/ is linked from README.md, and every docs/ link there is a file."""
    linked = {target.split("#", 1)[0] for target in links(README) if target.startswith("docs/")}
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), "docs pages the README does not link"
    assert {target for target in linked if not (ROOT / target).is_file()} == set()
    assert len(pages) >= 8  # reference, ui, policies, routing, emulator, tls, safety, performance


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_link_of_a_page_reaches_its_file_and_heading(page: str) -> None:
    """A relative link names a file of the repository, and its `#anchor` a heading of that file."""
    where = (ROOT / page).parent
    broken = []
    for target in links(PAGES[page]):
        if re.match(r"[a-z]+:", target):
            continue  # https://, mailto: — not ours to check
        path, _, anchor = target.partition("#")
        file = (where / path).resolve() if path else ROOT / page
        if not file.is_file():
            broken.append(f"{target}: no file {file}")
        elif anchor and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert broken == []


def test_the_link_check_sees_what_it_looks_for() -> None:
    # A checker that found no link or no anchor would pass forever.
    text = "See [a](docs/a.md#b-c) and ![x](ui.svg), `[not](this.md)`\n```\n[nor](that.md)\n```\n"
    assert links(text) == ["docs/a.md#b-c", "ui.svg"]
    assert slug("## Put it back at the consumer's pace: `--spread`") == "put-it-back-at-the-consumers-pace---spread"
    assert slug("### `emulator serve` against hostile clients") == "emulator-serve-against-hostile-clients"
    assert "resubmit-to-one-subscription-targeted-routing" in anchors(ROOT / "docs" / "routing.md")
    assert sum(len(links(text)) for text in PAGES.values()) > 20
