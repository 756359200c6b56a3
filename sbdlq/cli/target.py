"""The backend for the resolved target, opened as every command opens it (transport, SDK shortcuts,
the libraries' loggers kept off stderr)."""

from __future__ import annotations

import os
import sys
from typing import Any

from sbdlq.cli.settings import Settings
from sbdlq.sdk_shortcut_mode import SDK_SHORTCUTS_ENV


def open_target(s: Settings, *, create: bool = False) -> Any:
    """The backend for the resolved target (an async context manager)."""
    from sbdlq.backends import open_backend

    target = s.target()
    if not s.debug and (target.kind != "emulator" or "asyncio" in sys.modules):
        # The in-process emulator read without an event loop (sbdlq/loopless.py) loads neither
        # the SDK nor asyncio, so nothing could log: `count` starts without the logging module.
        quiet_foreign_loggers()
    transport = s.transport() if target.kind != "emulator" else None
    if transport is not None:
        s.log(f"network: {transport.describe(_endpoint_port(target))}")
    # SBDLQ_SDK_SHORTCUTS is read by the backend itself; a profile's sdk_shortcuts stands in for it.
    shortcuts = None if os.environ.get(SDK_SHORTCUTS_ENV) else s.profile_default("sdk_shortcuts")
    backend = open_backend(
        target, timeout_s=s.timeout_s, verbose=s.log, create=create, transport=transport, sdk_shortcuts=shortcuts
    )
    if backend.description:
        s.log(f"backend: {backend.description}")
    return backend


#: Loggers of the libraries under a run: the SDK (its AMQP stack is `azure.servicebus._pyamqp`),
#: uamqp where the SDK uses it, and asyncio, which logs `socket.send() raised exception.` for
#: writes on a cut connection and "Task exception was never retrieved".
FOREIGN_LOGGERS = ("azure", "uamqp", "asyncio")


def quiet_foreign_loggers() -> None:
    """Keep the libraries' log lines off stderr (--debug shows them): sbdlq's stderr is its own,
    one line per event in its words, and the run's summary says what a cut or a stall cost."""
    import logging

    for name in FOREIGN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        logger.propagate = False


def _endpoint_port(target: Any) -> int | None:
    """The AMQP port a connection string names for an emulator (UseDevelopmentEmulator), else None."""
    if target.kind != "connection_string":
        return None
    from sbdlq.connstr import parse_connection_string

    info = parse_connection_string(target.value)
    return (info.port or 5672) if info.use_emulator else info.port
