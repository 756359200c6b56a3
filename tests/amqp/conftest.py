"""Fixtures: `sbdlq emulator serve` started in-process on free loopback ports with a temp store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.serve import Emulator, finish, start


@pytest.fixture(scope="session")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    pytest.importorskip("proton")
    emu = start(tmp_path_factory.mktemp("amqp") / "emulator.db")
    yield emu
    finish(emu)


@pytest.fixture(scope="session")
def keyed_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    pytest.importorskip("proton")
    emu = start(tmp_path_factory.mktemp("amqp-key") / "emulator.db", key="s3cret-key")
    yield emu
    finish(emu)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    """Start a private emulator (its own store); stopped at teardown if the test did not."""
    pytest.importorskip("proton")
    started: list[Emulator] = []

    def _launch(name: str = "private.db", *, key: str | None = None, **options: Any) -> Emulator:
        emu = start(tmp_path / name, key=key, **options)
        started.append(emu)
        return emu

    yield _launch
    for emu in started:
        if emu.thread.is_alive():
            finish(emu)
        else:
            emu.engine.close()


@pytest.fixture
def conn(emulator: Emulator) -> Iterator[Any]:
    """A bare python-qpid-proton BlockingConnection (SASL ANONYMOUS) to the session emulator, with a token put."""
    from support.tokens import bare_connection

    c = bare_connection(emulator.port)
    yield c
    c.close()


@pytest.fixture
def client(emulator: Emulator) -> Iterator[Any]:
    from azure.servicebus import ServiceBusClient

    # keep_alive=None: no keep-alive thread, whose 1 s sleep would slow every sender's close.
    with ServiceBusClient.from_connection_string(emulator.conn_str(), retry_total=0, keep_alive=None) as sb:
        yield sb
