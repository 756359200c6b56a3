"""Shared fixtures over the one harness in tests/support: a store, an engine, a seeder, the CLI.

`cli("count", "orders", "-o", "json")` runs `sbdlq --emulator <store> count orders -o json`
in-process and returns `(exit_code, stdout, stderr)` (a NamedTuple, so `.stdout` works too).
The environment is isolated (support.cli.isolated_env): no user config or HOME, no SBDLQ_*
variables, a wide terminal so Rich tables don't wrap, no colour.

Suites specialise these fixtures rather than redefining them with other types: the engine
tests give `engine` a clock they move, the contract tests point `store` at the shared
listener's store for the servicebus backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import Cli, Clock, Seeder

from sbdlq.emulator.engine import Engine


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Where the test's emulator store lives (not created)."""
    return tmp_path / "emulator.db"


@pytest.fixture
def broker_clock() -> Callable[[], float] | None:
    """The clock the test's engine reads: None is the wall clock, as another process sees it.

    Suites override this (not `engine`): the engine tests with a clock they move, the
    contract tests with virtual time.
    """
    return None


@pytest.fixture
def engine(store: Path, broker_clock: Callable[[], float] | None) -> Iterator[Engine]:
    """An engine on the test's store (creates it), reading `broker_clock`."""
    eng = Engine(store, clock=broker_clock)
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture
def clock() -> Clock:
    """A broker clock the test moves (for engines that take `clock=`)."""
    return Clock()


@pytest.fixture
def seed(engine: Engine, store: Path) -> Seeder:
    """Set up entities and messages through the test's engine, and look inside the store."""
    return Seeder(engine, store)


@pytest.fixture
def cli(store: Path, tmp_path: Path) -> Cli:
    """Run the CLI against the test's store: `code, out, err = cli("emulator", "list")`."""
    return Cli(store, tmp_path)


@pytest.fixture(autouse=True)
def notes_as_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Informational notes show as a person at a terminal sees them (CliRunner's stderr is no
    terminal); tests of the off-terminal rule patch `stderr_is_terminal` back to False."""
    monkeypatch.setattr("sbdlq.terminal.stderr_is_terminal", lambda: True)
