"""`sbdlq emulator serve` as a user starts it: a process of its own on random loopback ports,
sharing the CLI runner's state dir (so a test reads the record it leaves)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from sbdlq.addresses import Address, EntityPath
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage
from support.cli import Cli

#: An emulator connection string naming only the AMQP port, as a user copies it from the docs.
EMULATOR_CONN = (
    "Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
)


def seed_orders(store: Path) -> None:
    """Queue `orders` with one active message and one in its DLQ (reason Poison)."""
    with Engine(store) as engine:
        engine.create_queue("orders")
        engine.send("orders", [OutboundMessage(body=b"x")] * 2)
        got = engine.receive(Address(EntityPath("orders")), 1)
        engine.dead_letter(Address(EntityPath("orders")), [m.lock_token for m in got if m.lock_token], "Poison", "bad")


@contextlib.contextmanager
def serve_process(cli: Cli, state_home: Path, *options: str) -> Iterator[subprocess.Popen[str]]:
    """`sbdlq --emulator STORE emulator serve OPTIONS` with stdout piped; stopped with SIGTERM after."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBDLQ_")}
    env.update(HOME=str(cli.store.parent), XDG_STATE_HOME=str(state_home), SBDLQ_CONFIG=str(state_home / "none"))
    cmd = [sys.executable, "-m", "sbdlq", "--emulator", str(cli.store), "emulator", "serve", *options]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
