"""The one way tests run the sbdlq CLI in-process, in one isolated environment.

Every variable that could point sbdlq at something other than the test's store is unset
(all SBDLQ_* ones), HOME and XDG_CONFIG_HOME point into the test's tmp_path (so neither
the user's config nor the user's default emulator store can leak in), SBDLQ_CONFIG names a
file that does not exist, and colour/terminal hints are cleared. Only the table width
differs per suite (`columns`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from click.testing import Result
from typer.testing import CliRunner

#: Every variable sbdlq reads (grep SBDLQ_ sbdlq/): unset unless a test sets it.
SBDLQ_VARS = (
    "SBDLQ_CONFIG",
    "SBDLQ_CONNECTION_STRING",
    "SBDLQ_EMULATOR",
    "SBDLQ_EMULATOR_CLOCK_SKEW",
    "SBDLQ_EMULATOR_HTTP_PORT",
    "SBDLQ_EMULATOR_KEY",
    "SBDLQ_EMULATOR_LATENCY",
    "SBDLQ_NAMESPACE",
    "SBDLQ_PROFILE",
    "SBDLQ_STATE_DIR",
    "SBDLQ_TIMEOUT",
    "SBDLQ_TRANSPORT",
)
#: Proxy variables sbdlq (--proxy) and the HTTP clients under it honour.
PROXY_VARS = (
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
)
#: Terminal and colour hints that would change what Rich prints.
TERMINAL_VARS = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM")


def isolated_env(home: Path, *, columns: int = 200, config: Path | None = None) -> dict[str, str | None]:
    """The CLI's environment for a test: nothing of the user's, a fixed width, no colour."""
    env: dict[str, str | None] = {name: None for name in (*SBDLQ_VARS, *PROXY_VARS, *TERMINAL_VARS)}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        # where `emulator serve` records its ports (sbdlq.emulator.discovery)
        XDG_STATE_HOME=str(home / ".local" / "state"),
        SBDLQ_CONFIG=str(config or home / "no-config.yaml"),
        COLUMNS=str(columns),
        LINES="40",
    )
    return env


class CliResult(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """stdout parsed as one JSON document."""
        return json.loads(self.stdout)


class Cli:
    """Invokes the sbdlq app in-process against one emulator store, in the isolated environment."""

    def __init__(self, store: Path, home: Path, *, columns: int = 200) -> None:
        self.store = store
        self.env = isolated_env(home, columns=columns)

    def __call__(self, *args: str, input: str | bytes | None = None, env: Mapping[str, str] | None = None) -> CliResult:
        """`sbdlq --emulator STORE ARGS...`."""
        return self.bare("--emulator", str(self.store), *args, input=input, env=env)

    def bare(self, *args: str, input: str | bytes | None = None, env: Mapping[str, str] | None = None) -> CliResult:
        """`sbdlq ARGS...` with no target option (for testing target resolution)."""
        result = self.invoke(*args, input=input, env=env, catch_exceptions=False)
        return CliResult(result.exit_code, result.stdout, result.stderr)

    def invoke(
        self,
        *args: str,
        input: str | bytes | None = None,
        env: Mapping[str, str | None] | None = None,
        catch_exceptions: bool = True,
    ) -> Result:
        """`sbdlq ARGS...`, returning click's Result (for tests that read `.output`)."""
        from sbdlq.cli.main import app

        merged = {**self.env, **(env or {})}
        return CliRunner().invoke(app, list(args), input=input, env=merged, catch_exceptions=catch_exceptions)
