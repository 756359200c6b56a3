"""Service Bus semantics (DESIGN §6) over the SQLite store. No CLI, no asyncio.

The rules live here; the backends and the AMQP listener are thin layers above. Every
Engine method is one transaction, so a process killed at any line leaves the store as it
was before or after the call, and several processes may share one store. (counts and peek
may first run a short transaction of their own to settle what the broker does on its
timers: scheduled messages falling due, locks lapsing.)

Modules, one job each: `core.py` (the Engine's public operations), `entities.py` (create,
update, delete, look up), `rules.py` (subscription filters and actions), `router.py` (fan-out,
forwarding, dead-lettering), `sessions.py` (session locks and state), `inserts.py` (the TTL,
scheduling, expiry and header-size rules and the row writers), `locks.py` (receiving and
settlement), `upkeep.py` (the broker's timers, run lazily), `rows.py` (named message rows),
`vocabulary.py` (enums, limits, entities, drafts, the `Quotas` of `serve --quotas`),
`quotas.py` (those quotas checked at entity creation and at send) and `errors.py` (the
broker's refusals, named).
"""

from typing import TYPE_CHECKING, Any

from .core import Engine
from .vocabulary import (
    HEADER_DESCRIPTION,
    HEADER_LIMIT,
    HEADER_REASON,
    HOPS_DESCRIPTION,
    HOPS_REASON,
    MAX_DELIVERY_REASON,
    MAX_HOPS,
    MAX_TIME_MS,
    SESSION_DESCRIPTION,
    SESSION_REASON,
    TTL_DESCRIPTION,
    TTL_REASON,
    EntityKind,
    Queue,
    Rule,
    State,
)

__all__ = [
    "HEADER_DESCRIPTION",
    "HEADER_LIMIT",
    "HEADER_REASON",
    "HOPS_DESCRIPTION",
    "HOPS_REASON",
    "MAX_DELIVERY_REASON",
    "MAX_HOPS",
    "MAX_TIME_MS",
    "SESSION_DESCRIPTION",
    "SESSION_REASON",
    "TTL_DESCRIPTION",
    "TTL_REASON",
    "AcceptedSession",
    "Engine",
    "EntityKind",
    "Queue",
    "Rule",
    "State",
]

if TYPE_CHECKING:
    from .sessions import AcceptedSession


def __getattr__(name: str) -> Any:
    """AcceptedSession, loaded when first asked for (`count` takes no session)."""
    if name == "AcceptedSession":
        from .sessions import AcceptedSession

        return AcceptedSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
