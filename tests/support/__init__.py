"""The one test harness every suite uses: seeding, clocks, a message with every field, and the isolated CLI runner.

Import it as `from support import Seeder, ids, ...` (tests/ is on sys.path through the
root conftest); the fixtures over it live in tests/conftest.py.
"""

from support.cli import Cli, CliResult, isolated_env
from support.clock import Clock, VirtualTime, run_virtual
from support.messages import APPLICATION_PROPERTIES, PRODUCER_FIELDS, full_message, producer_fields
from support.seeding import Seeder, dead_letter_all, dead_lettered_store, ids, stored_ids

__all__ = [
    "APPLICATION_PROPERTIES",
    "PRODUCER_FIELDS",
    "Cli",
    "CliResult",
    "Clock",
    "Seeder",
    "VirtualTime",
    "dead_letter_all",
    "dead_lettered_store",
    "full_message",
    "ids",
    "isolated_env",
    "producer_fields",
    "run_virtual",
    "stored_ids",
]
