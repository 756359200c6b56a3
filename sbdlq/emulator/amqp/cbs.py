"""The `$cbs` node: claims-based security put-token requests."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from . import sas


@dataclass(frozen=True, slots=True)
class Outcome:
    """The reply to a put-token, and what it grants the connection (None: nothing)."""

    status: int
    description: str
    grant: sas.Grant | None


def put_token(properties: dict[str, Any], token: Any, key: str | None, *, now: float | None = None) -> Outcome:
    """Check a put-token request; without a key every token is accepted (the emulator's default)."""
    operation = str(properties.get("operation") or "")
    if operation != "put-token":
        return Outcome(400, f"unsupported $cbs operation {operation!r}", None)
    if key is None:
        return Outcome(202, "Accepted", sas.Grant(""))
    # azure-servicebus labels SAS tokens "jwt" too (JWTTokenAuth's default): judge by content.
    text = token.decode("utf-8", "replace") if isinstance(token, bytes) else str(token or "")
    if not text.startswith(sas.PREFIX):
        return Outcome(401, "Unauthorized: this emulator accepts only SharedAccessSignature tokens", None)
    try:
        grant = sas.verify(text, key, now=time.time() if now is None else now)
    except sas.TokenRejected as exc:
        return Outcome(401, f"Unauthorized: {exc}", None)
    return Outcome(202, "Accepted", grant)
