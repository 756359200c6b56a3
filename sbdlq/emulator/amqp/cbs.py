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
    """Check a put-token request. With a key, the token must be signed with it; without one (the
    emulator's default) any well-formed token is accepted: a SAS token for what its `sr` names,
    or a JWT (an Entra ID token: it cannot be checked here) for the whole namespace."""
    operation = str(properties.get("operation") or "")
    if operation != "put-token":
        return Outcome(400, f"unsupported $cbs operation {operation!r}", None)
    # azure-servicebus labels SAS tokens "jwt" too (JWTTokenAuth's default): judge by content.
    text = token.decode("utf-8", "replace") if isinstance(token, bytes) else str(token or "")
    when = time.time() if now is None else now
    if key is None and _jwt(text):
        return Outcome(202, "Accepted", sas.Grant(""))
    if not text.startswith(sas.PREFIX):
        accepted = "SharedAccessSignature tokens" if key is not None else "SharedAccessSignature or JWT tokens"
        return Outcome(401, f"Unauthorized: this emulator accepts only {accepted}", None)
    try:
        grant = sas.verify(text, key, now=when) if key is not None else sas.well_formed(text, now=when)
    except sas.TokenRejected as exc:
        return Outcome(401, f"Unauthorized: {exc}", None)
    return Outcome(202, "Accepted", grant)


def _jwt(text: str) -> bool:
    """Whether text has a JWT's shape: three base64url parts, the first two not empty."""
    parts = text.strip().split(".")
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")
    return len(parts) == 3 and all(parts[:2]) and all(set(p) <= alphabet for p in parts)


def add_grant(grants: list[sas.Grant], grant: sas.Grant, now: float) -> None:
    """Keep a new grant, dropping expired ones (SDKs refresh tokens for the life of a connection)."""
    grants[:] = [g for g in grants if g.live(now) and g != grant]
    grants.append(grant)


def authorized(grants: Iterable[sas.Grant], path: str, now: float) -> bool:
    """Whether a live grant covers the path (`queue`, `queue/$DeadLetterQueue`, `t/Subscriptions/s`...)."""
    return any(g.live(now) and g.covers(path) for g in grants)
