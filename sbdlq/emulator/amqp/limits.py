"""The listener's resource limits, and the key it is started with (no proton import here)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sbdlq.emulator.engine.vocabulary import GENEROUS, Quotas
from sbdlq.errors import BadInput

KEY_ENV = "SBDLQ_EMULATOR_KEY"
REQUEST_MAX_BYTES = 64 * 1024  # `$cbs` and `$management` requests, as on Service Bus
MAX_FRAME_SIZE = 64 * 1024  # what the listener advertises in its open frame
# An oversized message is read to its end (and dropped) to reject it; past this, its link is detached.
DISCARD_MAX_BYTES = 100 * 1024 * 1024 + 64 * 1024
MAX_CONNECTIONS = 1000
AUTH_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 10.0
HTTP_MAX_CLIENTS = 64


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may cost the listener before it is refused or disconnected."""

    max_connections: int = MAX_CONNECTIONS
    # With a key: SASL and a valid put-token; without: SASL and the AMQP open.
    auth_timeout_s: float = AUTH_TIMEOUT_S
    max_frame_size: int = MAX_FRAME_SIZE
    request_max_bytes: int = REQUEST_MAX_BYTES
    discard_max_bytes: int = DISCARD_MAX_BYTES
    http_timeout_s: float = HTTP_TIMEOUT_S
    http_max_clients: int = HTTP_MAX_CLIENTS
    emfile_backoff_s: float = 0.5  # stop accepting this long when out of file descriptors
    log_interval_s: float = 10.0  # one warning per interval for floods, not one per event
    quotas: Quotas = GENEROUS  # the namespace's quotas (--quotas), which the engine enforces

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise BadInput("--max-connections must be at least 1")
        if not self.auth_timeout_s > 0:
            raise BadInput("--auth-timeout must be more than 0 seconds")


def resolve_key(key: str | None, key_file: str | None) -> str | None:
    """The SAS key from --key, --key-file or SBDLQ_EMULATOR_KEY (one of them); never echoes it."""
    if key_file is None:
        return key or None
    if key:
        raise BadInput(f"--key-file and --key (or {KEY_ENV}) both give a key", hint="pass only one")
    try:
        text = Path(key_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else "not UTF-8 text"
        raise BadInput(f"cannot read --key-file {key_file}: {reason}") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise BadInput(f"--key-file {key_file} must hold the key on one line", hint="no other text in the file")
    return lines[0]
