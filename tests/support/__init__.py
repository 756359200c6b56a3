"""The one test harness every suite uses: seeding, clocks, and the isolated CLI runner.

Import it as `from support import Seeder, ids, ...` (tests/ is on sys.path through the
root conftest); the fixtures over it live in tests/conftest.py.
"""

from support.cli import Cli, CliResult, isolated_env
from support.clock import Clock, VirtualTime, run_virtual
from support.seeding import Seeder, dead_lettered_store, ids

__all__ = [
    "Cli",
    "CliResult",
    "Clock",
    "Seeder",
    "VirtualTime",
    "dead_lettered_store",
    "ids",
    "isolated_env",
    "run_virtual",
]
