"""Fixtures for the emulator engine tests: the engine reads a clock the test moves.

Everything else (the store, the seeder `h`, Clock) is the shared harness in tests/support.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import Clock, Seeder

#: The names the engine tests' type hints import from here.
Helpers = Seeder
__all__ = ["Clock", "Helpers"]


@pytest.fixture
def db_path(store: Path) -> Path:
    """The engine's store file (the shared `store`)."""
    return store


@pytest.fixture
def broker_clock(clock: Clock) -> Clock:
    """The test's engine reads the clock the test moves: nothing in these tests sleeps."""
    return clock


@pytest.fixture
def h(seed: Seeder) -> Seeder:
    """The shared seeder, by the short name the engine tests use."""
    return seed
