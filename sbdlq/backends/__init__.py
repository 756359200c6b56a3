"""Backends: the emulator engine or a real namespace, behind one interface."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.emulator.clock import emulator_clock
from sbdlq.errors import BadInput, UnknownTargetKind
from sbdlq.timeparse import parse_duration

if TYPE_CHECKING:
    from sbdlq.transport import Transport  # an annotation: the emulator's start does without it

__all__ = ["Backend", "BackendTarget", "ReceiveMode", "open_backend"]


class BackendTarget(Protocol):
    """What a backend needs of the target the caller resolved (profiles.Target is one): no profiles here."""

    @property
    def kind(self) -> str:
        """emulator | connection_string | namespace"""

    @property
    def value(self) -> str:
        """The store's path, the connection string or the namespace."""


def emulator_latency() -> float:
    """SBDLQ_EMULATOR_LATENCY in seconds (0 when unset)."""
    raw = os.environ.get("SBDLQ_EMULATOR_LATENCY")
    return parse_duration(raw, what="SBDLQ_EMULATOR_LATENCY") if raw else 0.0


def open_backend(
    target: BackendTarget,
    *,
    timeout_s: float = 30.0,
    verbose: Callable[[str], None] | None = None,
    create: bool = False,
    transport: Transport | None = None,
    sdk_shortcuts: str | None = None,
) -> Backend:
    """The backend for a target; azure is imported only for real namespaces."""
    if target.kind == "emulator":
        from sbdlq.backends.emulator import EmulatorBackend

        store = Path(target.value)
        if not create and not store.exists():
            raise BadInput(
                f"no emulator store at {target.value}",
                hint="create one with `sbdlq emulator init` or `sbdlq emulator demo`",
            )
        if not create and store.is_file() and store.stat().st_size == 0:
            # SQLite would quietly make an empty store of it: a truncated store would look empty.
            raise BadInput(
                f"{target.value} is empty (0 bytes), not an sbdlq emulator store",
                hint="make it a new store with `sbdlq emulator init`",
            )
        latency, clock = emulator_latency(), emulator_clock()
        return EmulatorBackend(target.value, latency_s=latency, clock=clock, timeout_s=timeout_s)
    if target.kind not in ("connection_string", "namespace"):
        # a kind this function was not taught: refused, never opened as a namespace
        raise UnknownTargetKind(f"unknown target kind {target.kind!r}")
    from sbdlq.backends.servicebus import ServiceBusBackend

    if target.kind == "connection_string":
        raw_port = os.environ.get("SBDLQ_EMULATOR_HTTP_PORT")
        if raw_port and not raw_port.isdigit():
            raise BadInput(f"invalid SBDLQ_EMULATOR_HTTP_PORT {raw_port!r}: a port number")
        return ServiceBusBackend(
            connection_string=target.value,
            timeout_s=timeout_s,
            verbose=verbose,
            # Where `sbdlq emulator serve --http-port` answers, for UseDevelopmentEmulator strings.
            admin_port=int(raw_port) if raw_port else None,
            transport=transport,
            sdk_shortcuts=sdk_shortcuts,
        )
    return ServiceBusBackend(
        namespace=target.value, timeout_s=timeout_s, verbose=verbose, transport=transport, sdk_shortcuts=sdk_shortcuts
    )
