"""SASL `MSSBCBS` next to ANONYMOUS, at the frame level (proton's built-in SASL knows neither).

Service Bus offers `MSSBCBS`: "authenticate with a `$cbs` token after the connection opens",
which is what ANONYMOUS means here too. Some AMQP stacks insist on it. Proton (without
Cyrus SASL) offers and accepts only ANONYMOUS, PLAIN and EXTERNAL, so the wire filter
(frame_repair.py) asks this module to add `MSSBCBS` to the mechanisms proton offers, and to hand
proton a client's `MSSBCBS` init as an ANONYMOUS one. The `$cbs` token is still required
before any link, by the guard, whichever mechanism the client chose.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from proton import UNDESCRIBED, Array, Data, Described, symbol, ulong

log = logging.getLogger(__name__)

_MECHANISMS, _INIT = 0x40, 0x41
#: what the listener offers, in Service Bus's order
OFFERED = ("MSSBCBS", "ANONYMOUS")
#: client mechanisms proton is handed as ANONYMOUS
AS_ANONYMOUS = frozenset({"MSSBCBS"})


def _decode(frame: bytes) -> tuple[int, list[Any]] | None:
    """(performative code, fields) of a SASL frame; None when it does not parse."""
    data = Data()
    try:
        data.decode(frame[frame[4] * 4 :])
        value = data.get_object()
    except Exception:  # proton raises its own DataException on bad bytes: proton refuses those itself
        return None
    if not isinstance(value, Described) or not isinstance(value.value, list):
        return None
    try:
        descriptor: Any = value.descriptor
        return int(descriptor), list(value.value)
    except (TypeError, ValueError):
        return None


def _frame(code: int, fields: list[Any]) -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), fields))
    body = data.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


def outbound(frame: bytes) -> bytes:
    """A SASL frame from proton: its sasl-mechanisms offer `OFFERED`; others pass unchanged."""
    parsed = _decode(frame)
    if parsed is None or parsed[0] != _MECHANISMS:
        return frame
    # proton's type stub leaves UNDESCRIBED (an Array's "no descriptor") out of PythonAMQPData
    offer = Array(UNDESCRIBED, Data.SYMBOL, *(symbol(m) for m in OFFERED))  # type: ignore[arg-type]
    return _frame(_MECHANISMS, [offer])


def inbound(frame: bytes) -> bytes:
    """A SASL frame from the client: an `MSSBCBS` sasl-init becomes an ANONYMOUS one (the
    token comes later, on `$cbs`); others pass unchanged."""
    parsed = _decode(frame)
    if parsed is None or parsed[0] != _INIT or not parsed[1] or str(parsed[1][0]) not in AS_ANONYMOUS:
        return frame
    log.debug("emulator: SASL %s taken as ANONYMOUS (a $cbs token is still required)", parsed[1][0])
    hostname = parsed[1][2] if len(parsed[1]) > 2 else None
    return _frame(_INIT, [symbol("ANONYMOUS"), None, hostname])
