"""What a start pays for: reads on the local emulator run without asyncio, `--help` without
markdown or tracebacks, and the console script builds only the command it is asked for,
with the same output as the whole app."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from sbdlq.cli.main import COMMANDS, asked_command
from sbdlq.loopless import NeedsEventLoop, pause, run_without_loop
from tests.support.process import sbdlq_env
from tests.support.seeding import Seeder, msgs

# The console script's entry point, and the whole app as Typer builds it (every command).
SCRIPT = "import sys; from sbdlq.entry import main; sys.argv[0] = 'sbdlq'; main()"
WHOLE_APP = "import sys; from sbdlq.cli.main import app; sys.argv[0] = 'sbdlq'; app()"
#: the command modules of each top-level command, read off main.COMMANDS
MODULES_OF = {command.name: command.modules for command in COMMANDS}


def _imported(argv: list[str], env: dict[str, str]) -> tuple[int, set[str]]:
    """Exit status of `sbdlq argv` and every module it imported (from -X importtime)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sbdlq", *argv], capture_output=True, text=True, env=env
    )
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc.returncode, names


@pytest.fixture
def seeded(engine: object, store: Path) -> dict[str, str]:
    seeder = Seeder(engine, store)  # type: ignore[arg-type]
    seeder.queue("orders")
    seeder.dead_letter("orders", msgs(3), reason="Bad")
    return {**sbdlq_env(store), "COLUMNS": "100", "NO_COLOR": "1"}


@pytest.mark.parametrize(
    "argv",
    [["count", "orders"], ["count", "orders", "-o", "json"], ["peek", "orders"], ["inspect-reason", "orders"]],
    ids=" ".join,
)
def test_reads_on_the_local_emulator_import_no_asyncio(seeded: dict[str, str], argv: list[str]) -> None:
    status, modules = _imported(argv, seeded)
    assert status == 0
    assert "asyncio" not in modules
    assert "sbdlq.backends.emulator" in modules  # it did reach the store


#: What `count` on the local emulator has no use for (issue 35: its start is held to 1.5× the Typer
#: + Rich import): the logging module (nothing can log without the SDK or an event loop), groups
#: (inspect-reason's), the connection-string parser and its redaction patterns, the transport
#: options, the peek table, the emulator admin commands' library, base64; the engine's sessions,
#: subscription rules and router (with its inserts and the SQL filter), and the dataclasses of
#: messages, of what is sent and of entity descriptions (sbdlq.models loads them on first use).
NOT_ON_COUNTS_PATH = {
    "logging",
    "sbdlq.groups",
    "sbdlq.connstr",
    "sbdlq.transport",
    "sbdlq.output.message_table",
    "sbdlq.emulator.admin",
    "base64",
    "sbdlq.emulator.engine.sessions",
    "sbdlq.emulator.engine.rules",
    "sbdlq.emulator.engine.router",
    "sbdlq.emulator.engine.inserts",
    "sbdlq.sqlfilter.subscription",
    "sbdlq.messages",
    "sbdlq.outbound",
    "sbdlq.entity_info",
}


@pytest.mark.parametrize("argv", [["count", "orders"], ["count", "orders", "-o", "json"]], ids=" ".join)
def test_count_on_the_local_emulator_imports_only_what_it_uses(seeded: dict[str, str], argv: list[str]) -> None:
    status, modules = _imported(argv, seeded)
    assert status == 0
    assert "sbdlq.backends.emulator" in modules
    assert not modules & NOT_ON_COUNTS_PATH


def test_moving_commands_and_latency_still_run_under_asyncio(seeded: dict[str, str]) -> None:
    status, modules = _imported(["resubmit", "orders", "--dry-run"], seeded)
    assert (status, "asyncio" in modules) == (0, True)
    status, modules = _imported(["count", "orders"], {**seeded, "SBDLQ_EMULATOR_LATENCY": "1ms"})
    assert (status, "asyncio" in modules) == (0, True)


def test_help_imports_neither_markdown_nor_tracebacks(seeded: dict[str, str]) -> None:
    status, modules = _imported(["--help"], seeded)
    assert status == 0
    assert not {m for m in modules if m.split(".")[0] in ("markdown_it", "pygments")}
    assert "rich.markdown" not in modules and "rich.traceback" not in modules


def test_help_imports_no_command_and_a_command_only_its_own(seeded: dict[str, str]) -> None:
    """The root's help lists every command from main.COMMAND_HELP; `count` loads its module, not the others."""
    every = {f"sbdlq.cli.commands.{module}" for command in COMMANDS for module in command.modules}
    own = {f"sbdlq.cli.commands.{module}" for module in MODULES_OF["count"]}
    assert own == {"sbdlq.cli.commands.dlq"} and len(every) > 5
    status, modules = _imported(["--help"], seeded)
    assert status == 0
    assert not modules & {*every, "sbdlq.emulator.engine"}
    status, modules = _imported(["count", "orders"], seeded)
    assert status == 0
    assert own <= modules and not modules & (every - own)


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-h"],
        ["count", "--help"],
        ["resubmit", "--help"],
        ["transfer-dlq", "--help"],
        ["transfer-dlq", "peek", "--help"],
        ["emulator", "--help"],
        ["count", "orders"],
        ["--timeout", "5", "count", "orders", "-o", "json"],
        ["count", "orders", "--timeout", "5", "-v"],
        ["peek", "orders", "-o", "jsonl"],
        ["inspect-reason", "orders", "-o", "json"],
        ["transfer-dlq", "count", "orders"],
        ["cuont", "orders"],
        ["count", "--bogus"],
        [],
    ],
    ids=lambda argv: " ".join(argv) or "(nothing)",
)
def test_the_console_script_answers_as_the_whole_app_does(seeded: dict[str, str], argv: list[str]) -> None:
    script = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, env=seeded)
    whole = subprocess.run([sys.executable, "-c", WHOLE_APP, *argv], capture_output=True, text=True, env=seeded)
    assert (script.returncode, script.stdout, script.stderr) == (whole.returncode, whole.stdout, whole.stderr)
    assert script.stdout or script.stderr


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["count", "orders"], "count"),
        (["--profile", "prod", "peek", "x"], "peek"),
        (["--emulator", "count", "peek", "x"], "peek"),  # a store named like a command is a value
        (["--emulator=count", "peek"], "peek"),
        (["-v", "--debug", "transfer-dlq", "count"], "transfer-dlq"),
        (["--timeout", "5"], None),
        (["--help"], None),
        ([], None),
    ],
)
def test_the_asked_command_skips_the_roots_options_and_their_values(argv: list[str], name: str | None) -> None:
    assert asked_command(argv) == name


def test_run_without_loop_drives_pauses_and_refuses_futures() -> None:
    async def reads() -> int:
        await pause()
        await pause()
        return 42

    assert run_without_loop(reads()) == 42

    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()

        async def waits() -> None:
            await future

        with pytest.raises(NeedsEventLoop):
            run_without_loop(waits())
    finally:
        loop.close()


def test_pause_lets_other_tasks_run_under_asyncio() -> None:
    seen: list[str] = []

    async def other() -> None:
        seen.append("other")

    async def main() -> None:
        task = asyncio.create_task(other())
        await pause()
        seen.append("main")
        await task

    asyncio.run(main())
    assert seen == ["other", "main"]
