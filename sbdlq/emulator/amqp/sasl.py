"""SASL `MSSBCBS` and `PLAIN` next to ANONYMOUS, at the frame level (proton's built-in SASL
cannot check a PLAIN password, and does not know MSSBCBS).

Service Bus offers `MSSBCBS`: "authenticate with a `$cbs` token after the connection opens",
which is what ANONYMOUS means here too. Some AMQP stacks insist on it. Proton (without
Cyrus SASL) offers and accepts only ANONYMOUS, PLAIN and EXTERNAL, so the wire filter
(frame_repair.py) asks this module to add `MSSBCBS` to the mechanisms proton offers, and to hand
proton a client's `MSSBCBS` init as an ANONYMOUS one. The `$cbs` token is still required
before any link, by the guard, unless the client chose PLAIN.

`PLAIN` carries the SAS key name and key as user name and password (qpid-jms and some Go and
Rust clients authenticate so): a pair the listener takes (any without `--key`, the key's name
and value with it) is handed proton as ANONYMOUS and the connection is authorized for the
whole namespace, as by a namespace token; any other pair is passed on as PLAIN, which proton
(allowing ANONYMOUS only) refuses with a failed SASL outcome.
"""

from __future__ import annotations

import hmac
import logging
import struct
from collections.abc import Callable
from typing import Any

from proton import UNDESCRIBED, Array, Data, Described, symbol, ulong

log = logging.getLogger(__name__)

_MECHANISMS, _INIT = 0x40, 0x41
#: what the listener offers, in Service Bus's order
OFFERED = ("MSSBCBS", "PLAIN", "ANONYMOUS")
#: the SAS key name `emulator serve` has (the one its connection string names)
KEY_NAME = "RootManageSharedAccessKey"
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
        # binary comes back as a view of the decoder's buffer: copy it before the decoder goes
        fields = [bytes(v) if isinstance(v, memoryview) else v for v in value.value]
        return int(descriptor), fields
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


def plain_checker(key: str | None) -> Callable[[str, str], bool]:
    """Whether a PLAIN user name and password are taken: any without a key; with one, the key's
    name and value."""

    def check(name: str, password: str) -> bool:
        if key is None:
            return True
        same_name = hmac.compare_digest(name.encode(), KEY_NAME.encode())
        return hmac.compare_digest(password.encode(), key.encode()) and same_name

    return check


def _plain_pair(response: Any) -> tuple[str, str] | None:
    """(user name, password) of a PLAIN initial response (`authzid NUL authcid NUL passwd`)."""
    if not isinstance(response, bytes):
        return None
    parts = bytes(response).split(b"\0")
    if len(parts) != 3:
        return None
    return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")


def inbound(frame: bytes, check_plain: Callable[[str, str], bool] | None = None) -> tuple[bytes, bool]:
    """A SASL frame from the client, and whether it authenticated the connection by PLAIN.

    An `MSSBCBS` sasl-init becomes an ANONYMOUS one (the token comes later, on `$cbs`); a
    `PLAIN` one whose pair check_plain takes becomes ANONYMOUS too, authorized; others pass
    unchanged (proton refuses what it does not allow).
    """
    parsed = _decode(frame)
    if parsed is None or parsed[0] != _INIT or not parsed[1]:
        return frame, False
    mechanism = str(parsed[1][0])
    hostname = parsed[1][2] if len(parsed[1]) > 2 else None
    if mechanism == "PLAIN" and check_plain is not None:
        pair = _plain_pair(parsed[1][1] if len(parsed[1]) > 1 else None)
        if pair is None or not check_plain(*pair):
            log.info("emulator: SASL PLAIN refused (user %r)", pair[0] if pair else None)
            return frame, False
        return _frame(_INIT, [symbol("ANONYMOUS"), None, hostname]), True
    if mechanism not in AS_ANONYMOUS:
        return frame, False
    log.debug("emulator: SASL %s taken as ANONYMOUS (a $cbs token is still required)", mechanism)
    return _frame(_INIT, [symbol("ANONYMOUS"), None, hostname]), False
