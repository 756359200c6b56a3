"""The session operations of `<entity>/$management`, over the engine's session locks.

Bodies and replies are the ones azure-servicebus sends and parses (_servicebus_session.py,
_session_browser.py, _common/mgmt_handlers.py). `holder` is the session holder of the
receiver link the request names in `associated-link-name` (a link of the same connection);
None when it names none. Only a session's holder may renew its lock or read and set its
state: a request without one is refused as if the lock were lost, as Service Bus does.
"""

from __future__ import annotations

from typing import Any

from proton import Data

from sbdlq.addresses import Address
from sbdlq.emulator.engine import Engine

from .operation_tables import Operation, Outcome, paging, required_text
from .plain_values import array, from_timestamp, to_timestamp

RENEW_SESSION_LOCK = "com.microsoft:renew-session-lock"
GET_SESSION_STATE = "com.microsoft:get-session-state"
SET_SESSION_STATE = "com.microsoft:set-session-state"
GET_MESSAGE_SESSIONS = "com.microsoft:get-message-sessions"
# `last-updated-time` at .NET's DateTime.MaxValue (year 10000) asks for every session.
_EVERY_SESSION_MS = 253402300800000


#: the holder of a request that names no session receiver of its own: it matches no lock
_NOBODY = ""


def _session_id(body: dict[str, Any]) -> str:
    return required_text(body, "session-id")


def _renew(engine: Engine, address: Address, body: dict[str, Any], holder: str | None) -> Outcome:
    until = engine.renew_session_lock(address, _session_id(body), _NOBODY if holder is None else holder)
    return 200, {"expiration": to_timestamp(until)}


def _get_state(engine: Engine, address: Address, body: dict[str, Any], holder: str | None) -> Outcome:
    state = engine.session_state(address, _session_id(body), _NOBODY if holder is None else holder)
    return 200, {"session-state": state}


def _set_state(engine: Engine, address: Address, body: dict[str, Any], holder: str | None) -> Outcome:
    raw = body.get("session-state")
    state = None if raw is None else raw.encode() if isinstance(raw, str) else bytes(raw)
    engine.set_session_state(address, _session_id(body), state, _NOBODY if holder is None else holder)
    return 200, None


def _list(engine: Engine, address: Address, body: dict[str, Any], holder: str | None) -> Outcome:
    ms = body.get("last-updated-time")
    after = None if ms is None or int(ms) >= _EVERY_SESSION_MS else from_timestamp(int(ms))
    skip, top = paging(body)
    found = engine.list_sessions(address, updated_after=after, skip=skip, top=top)
    if not found:
        return 204, None
    return 200, {"skip": skip + len(found), "sessions-ids": array(Data.STRING, found)}


SESSION_OPERATIONS: dict[str, Operation] = {
    RENEW_SESSION_LOCK: _renew,
    GET_SESSION_STATE: _get_state,
    SET_SESSION_STATE: _set_state,
    GET_MESSAGE_SESSIONS: _list,
}
