"""Shared access signature tokens: verify what a client puts on `$cbs`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, quote_plus, unquote, urlparse

PREFIX = "SharedAccessSignature "


@dataclass(frozen=True, slots=True)
class Grant:
    """What a verified token allows: a resource path prefix (`` = the whole namespace), until it expires."""

    path: str
    expires: float = math.inf  # the token's `se` (epoch seconds); keyless grants never expire

    def live(self, now: float) -> bool:
        """Whether the token is still valid at `now` (Service Bus ends a grant with its token)."""
        return now < self.expires

    def covers(self, entity_path: str) -> bool:
        """Whether the token's resource is the path or one of its parents.

        A token for an entity covers its sub-queues and, for a topic, its subscriptions; a
        token for a sub-queue covers that sub-queue only, never the entity above it.
        """
        prefix = self.path.strip("/").lower()
        path = entity_path.strip("/").lower()
        return not prefix or path == prefix or path.startswith(prefix + "/")


class TokenRejected(Exception):
    """A token that is malformed, expired or not signed with the key."""


def sign(resource: str, key: str, expiry: int) -> str:
    """The signature Service Bus SDKs compute: HMAC-SHA256 of `quote_plus(uri)\\nexpiry` with the key text."""
    text = f"{quote_plus(resource)}\n{int(expiry)}".encode()
    return base64.b64encode(hmac.new(key.encode("utf-8"), text, hashlib.sha256).digest()).decode("ascii")


def verify(token: str, key: str, *, now: float | None = None) -> Grant:
    """The grant of a valid token; TokenRejected says why it is not."""
    grant, resource, signature = _read(token, now)
    if not hmac.compare_digest(sign(resource, key, int(grant.expires)), signature):
        raise TokenRejected("the token's signature does not match the key")
    return grant


def well_formed(token: str, *, now: float | None = None) -> Grant:
    """The grant of a well-formed, unexpired token whatever key signed it (a keyless listener's
    check); TokenRejected says why it is not one."""
    return _read(token, now)[0]


def _read(token: str, now: float | None) -> tuple[Grant, str, str]:
    """A token's grant, resource and signature; TokenRejected when malformed or expired."""
    if not token.startswith(PREFIX):
        raise TokenRejected("not a SharedAccessSignature token")
    fields = {k.lower(): v[0] for k, v in parse_qs(token[len(PREFIX) :], keep_blank_values=True).items()}
    resource, signature, expiry = fields.get("sr"), fields.get("sig"), fields.get("se")
    if not resource or not signature or not expiry:
        raise TokenRejected("the token lacks sr, sig or se")
    try:
        expires = int(expiry)
    except ValueError:
        raise TokenRejected("the token's expiry is not a number")
    if expires <= (time.time() if now is None else now):
        raise TokenRejected("the token has expired")
    path = urlparse(resource).path if "://" in resource else resource
    return Grant(unquote(path), float(expires)), resource, signature
