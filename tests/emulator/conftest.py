"""Fixtures for the emulator engine tests: a store per test and a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sbdlq.emulator.engine import Engine
from sbdlq.models import Message, OutboundMessage
from sbdlq.paths import parse_address
from sbdlq.timeparse import from_epoch_ms

T0 = 1_700_000_000.0


class Clock:
    """A broker clock under the test's control: nothing in these tests sleeps."""

    def __init__(self, start: float = T0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        """Move the broker clock forward."""
        self.t += seconds

    def at(self, offset_s: float = 0.0) -> datetime:
        """The broker's time now (plus an offset) as an aware datetime."""
        value = from_epoch_ms(int(round((self.t + offset_s) * 1000)))
        assert value is not None
        return value


class Helpers:
    """Small shorthands shared by the engine tests (a fixture, so no test imports conftest)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @staticmethod
    def msgs(n: int, prefix: str = "m", **fields: Any) -> list[OutboundMessage]:
        """n outbound messages with ids and bodies `<prefix><i>`."""
        return [OutboundMessage(body=f"{prefix}{i}".encode(), message_id=f"{prefix}{i}", **fields) for i in range(n)]

    @staticmethod
    def ids(messages: list[Message]) -> list[str | None]:
        """The message ids, in order."""
        return [m.message_id for m in messages]

    def drain(self, address: str, batch: int = 100) -> list[Message]:
        """Receive-and-complete everything available now."""
        out: list[Message] = []
        a = parse_address(address)
        while True:
            got = self.engine.receive(a, batch)
            if not got:
                return out
            assert self.engine.complete(a, [m.lock_token for m in got if m.lock_token]) == []
            out.extend(got)

    def peek_ids(self, address: str, n: int = 1000) -> list[str | None]:
        """Message ids a peek of the whole queue shows."""
        return self.ids(self.engine.peek(parse_address(address), 0, n))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "emulator.db"


@pytest.fixture
def engine(db_path: Path, clock: Clock) -> Iterator[Engine]:
    eng = Engine(db_path, clock=clock)
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture
def h(engine: Engine) -> Helpers:
    return Helpers(engine)
