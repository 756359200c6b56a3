"""`--help` at 80 columns and value completion (issue 14 item 12).

Every command's help, rendered at 80 columns, shows every option name whole (never
`--keep-dead-letter-pr…`) and its defaults as `[default: 32]`. The values of `-o` and `--by`
complete through the protocol all three shell scripts speak (`_SBDLQ_COMPLETE`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from sbdlq.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    "COLUMNS": "80",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "SBDLQ_CONFIG": "/nonexistent/sbdlq-config.yaml",
    "SBDLQ_PROFILE": None,
    "SBDLQ_CONNECTION_STRING": None,
    "SBDLQ_NAMESPACE": None,
    "SBDLQ_EMULATOR": None,
}


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command and group under `group`, with the words that reach it."""
    found: list[tuple[tuple[str, ...], click.Command]] = [(path, group)]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


ROOT_COMMAND = typer.main.get_command(app)
assert isinstance(ROOT_COMMAND, click.Group)
COMMANDS = _commands(ROOT_COMMAND)


def help_at_80(*words: str) -> str:
    result = CliRunner().invoke(app, [*words, "--help"], env=ENV)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(("words", "command"), COMMANDS, ids=[" ".join(w) or "sbdlq" for w, _ in COMMANDS])
def test_help_at_80_columns_shows_every_option_name_whole(words: tuple[str, ...], command: click.Command) -> None:
    text = help_at_80(*words)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "…-" not in text and not re.search(r"--[\w-]+…", text), text
    # get_params adds the help option (-h, --help) to the declared ones.
    params = command.get_params(click.Context(command, help_option_names=["-h", "--help"]))
    names = [name for param in params if isinstance(param, click.Option) for name in param.opts]
    assert "--help" in names
    for name in names:
        # Whole, as a word of its own on one line.
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), f"{' '.join(words)}: {name} cut:\n{text}"
    assert "[default: (" not in text


def test_resubmit_help_at_80_columns() -> None:
    text = help_at_80("resubmit")
    assert "│ --keep-dead-letter-properties                        Keep DeadLetterReason   │\n" in text
    assert "[default: 32]" in text and "[default: 100]" in text
    assert (
        "│ --output  -o      TEXT  table, json, jsonl, yaml, tsv (no header,            │\n"
        "│                         tab-separated) or none (exit status only); default:  │\n"
        "│                         table.                                               │\n"
    ) in text


def test_purge_and_peek_defaults_read_plainly() -> None:
    assert "[default: 500]" in help_at_80("purge")
    peek = help_at_80("peek")
    assert "(default: 20 in a table," in peek and "all in other formats)." in peek
    assert "table, json, jsonl, yaml, tsv" in peek


# ------------------------------------------------------------------ profile values still apply


def test_a_profile_concurrency_applies_when_the_option_is_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sbdlq.cli.options import tuning
    from sbdlq.cli.settings import Settings
    from sbdlq.profiles import Setting, Source

    config = tmp_path / "config.yaml"
    config.write_text(f"profiles:\n  p:\n    emulator: {tmp_path / 'e.db'}\n    concurrency: 4\n")
    monkeypatch.setenv("SBDLQ_CONFIG", str(config))
    s = Settings(options={"profile": Setting("p", Source.OPTION)}, profile="p")
    command = typer.main.get_command(app).commands["resubmit"]  # type: ignore[attr-defined]
    given = command.make_context("resubmit", ["q", "--concurrency", "9"], parent=None)
    default = command.make_context("resubmit", ["q"], parent=None)
    assert tuning(given, s, "concurrency", 9) == 9
    assert tuning(default, s, "concurrency", 32) == 4
    assert tuning(default, s, "batch_size", 100) == 100


# ------------------------------------------------------------------ value completion


def complete(shell: str, words: str, incomplete: str) -> list[str]:
    """Values sbdlq offers on TAB, as the shell's script asks for them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBDLQ_")}
    env["SBDLQ_CONFIG"] = "/nonexistent/sbdlq-config.yaml"
    env["_SBDLQ_COMPLETE"] = f"complete_{shell}"
    if shell == "fish":
        env.update(COMP_WORDS=f"{words} {incomplete}", COMP_CWORD=incomplete)
    else:
        env.update(COMP_WORDS=f"{words} {incomplete}", COMP_CWORD=str(len(words.split())))
    sbdlq = Path(sys.executable).with_name("sbdlq")
    result = subprocess.run([str(sbdlq)], env=env, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    if shell == "zsh":
        # type, value, help: three lines per item.
        return result.stdout.splitlines()[1::3]
    return [line.split(",", 1)[1].split("\t")[0] for line in result.stdout.splitlines() if line]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_output_values_complete(shell: str) -> None:
    assert complete(shell, "sbdlq peek q -o", "") == ["table", "json", "jsonl", "yaml", "tsv", "none"]
    assert complete(shell, "sbdlq count --output", "js") == ["json", "jsonl"]
    assert complete(shell, "sbdlq emulator list -o", "t") == ["table", "tsv"]
    assert complete(shell, "sbdlq config show -o", "y") == ["yaml"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_group_by_values_complete(shell: str) -> None:
    assert complete(shell, "sbdlq inspect-reason q --by", "") == [
        "reason",
        "description",
        "fingerprint",
        "source",
        "subject",
        "property:",
        "hour",
        "day",
        "entity",
    ]
    assert complete(shell, "sbdlq transfer-dlq inspect-reason q --by", "s") == ["source", "subject"]


def test_completion_scripts_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "completions" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert (result.returncode, result.stderr) == (0, "")
