"""Service Bus semantics (DESIGN §6) over the SQLite store. No CLI, no asyncio.

The rules live here; the backends and the AMQP listener are thin layers above. Every
Engine method is one transaction, so a process killed at any line leaves the store as it
was before or after the call, and several processes may share one store. (counts and peek
may first run a short transaction of their own to settle what the broker does on its
timers: scheduled messages falling due, locks lapsing.)

Modules, one job each: `core` (the Engine's public operations), `entities` (create,
update, delete, look up), `rules` (subscription filters and actions), `routing` (fan-out,
forwarding, dead-lettering), `sessions` (session locks and state), `inserts` (the TTL,
scheduling, expiry and header-size rules and the row writers), `locks` (receiving and
settlement), `upkeep` (the broker's timers, run lazily), `rows` (named message rows),
`model` (enums, limits, entities, drafts) and `errors` (the broker's refusals, named).
"""

from .core import Engine
from .sessions import AcceptedSession
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
