"""The `$cbs` node: claims-based security put-token requests, and what the grants allow."""

from __future__ import annotations

import time
from collections.abc import Iterable
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


def add_grant(grants: list[sas.Grant], grant: sas.Grant, now: float) -> None:
    """Keep a new grant, dropping expired ones (SDKs refresh tokens for the life of a connection)."""
    grants[:] = [g for g in grants if g.live(now) and g != grant]
    grants.append(grant)


def authorized(grants: Iterable[sas.Grant], path: str, now: float) -> bool:
    """Whether a live grant covers the path (`queue`, `queue/$DeadLetterQueue`, `t/Subscriptions/s`...)."""
    return any(g.live(now) and g.covers(path) for g in grants)
