"""Shared fixtures: a temporary emulator store, an engine on it, and the CLI run against it.

`cli("count", "orders", "-o", "json")` runs `sbdlq --emulator <store> count orders -o json`
in-process and returns `(exit_code, stdout, stderr)` (a NamedTuple, so `.stdout` works too).
The environment is isolated: no user config, no target variables, a wide terminal so Rich
tables don't wrap, no colour.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from typer.testing import CliRunner

from sbdlq.emulator.engine import Engine

# Variables that would point sbdlq somewhere else than the test's store.
_TARGET_VARS = (
    "SBDLQ_CONNECTION_STRING",
    "SBDLQ_NAMESPACE",
    "SBDLQ_EMULATOR",
    "SBDLQ_PROFILE",
    "SBDLQ_TIMEOUT",
    "SBDLQ_EMULATOR_KEY",
    "SBDLQ_EMULATOR_LATENCY",
    "SBDLQ_EMULATOR_CLOCK_SKEW",
)


class CliResult(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """stdout parsed as one JSON document."""
        return json.loads(self.stdout)


class Cli:
    """Invokes the sbdlq app in-process against one emulator store."""

    def __init__(self, store: Path, config_file: Path) -> None:
        self.store = store
        self.env: dict[str, str | None] = {name: None for name in _TARGET_VARS}
        self.env.update(SBDLQ_CONFIG=str(config_file), COLUMNS="200", NO_COLOR="1", TERM="dumb")

    def __call__(self, *args: str, input: str | bytes | None = None, env: Mapping[str, str] | None = None) -> CliResult:
        """`sbdlq --emulator STORE ARGS...`."""
        return self.bare("--emulator", str(self.store), *args, input=input, env=env)

    def bare(self, *args: str, input: str | bytes | None = None, env: Mapping[str, str] | None = None) -> CliResult:
        """`sbdlq ARGS...` with no target option (for testing target resolution)."""
        from sbdlq.cli.main import app

        merged = {**self.env, **(env or {})}
        result = CliRunner().invoke(app, list(args), input=input, env=merged, catch_exceptions=False)
        return CliResult(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Where the test's emulator store lives (not created)."""
    return tmp_path / "emulator.db"


@pytest.fixture
def engine(store: Path) -> Iterator[Engine]:
    """An engine on the test's store (creates it)."""
    eng = Engine(store)
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture
def cli(store: Path, tmp_path: Path) -> Cli:
    """Run the CLI against the test's store: `code, out, err = cli("emulator", "list")`."""
    return Cli(store, tmp_path / "no-config.yaml")
