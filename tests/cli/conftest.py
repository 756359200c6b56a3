"""Fixtures of the CLI suites: the command as a user types it, against the test's store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from support import Cli

from sbdlq.emulator.engine import Engine


@pytest.fixture
def sbdlq(engine: Engine, store: Path, tmp_path: Path) -> Callable[..., Result]:
    """Run `sbdlq --emulator STORE ARGS...` (80 columns, off a terminal) and return the result."""
    cli = Cli(store, tmp_path, columns=80)

    def invoke(*args: str, input: str | None = None) -> Result:
        return cli.invoke("--emulator", str(store), *args, input=input)

    return invoke


@pytest.fixture
def state_home(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's state dir, also this process's (so the test reads what the command wrote)."""
    monkeypatch.setenv("XDG_STATE_HOME", cli.env["XDG_STATE_HOME"])
    return Path(cli.env["XDG_STATE_HOME"])
