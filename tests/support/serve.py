"""`sbdlq emulator serve` started in-process on free loopback ports with a temp store (the
amqp tests' fixtures and any test that needs a listener of its own options)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from support.clock import SkewClock

CONN = (
    "Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey={key};UseDevelopmentEmulator=true;"
)
DEFAULT_KEY = "SAS_KEY_VALUE"
#: Where the SDK dials AMQPS whatever port a namespace or endpoint names: one listener per machine.
AMQPS_PORT = 5671
_names = itertools.count(1)


@dataclass
class Emulator:
    """A running listener, and an engine of our own on the same store to set up entities."""

    store: str
    port: int
    http_port: int | None
    key: str | None
    engine: Any
    thread: threading.Thread
    stop: threading.Event
    errors: list[BaseException] = field(default_factory=list)
    #: The listener's and `engine`'s clock: the wall clock plus a skew `advance` moves.
    clock: SkewClock = field(default_factory=SkewClock)

    def conn_str(self, key: str | None = None) -> str:
        return CONN.format(port=self.port, key=key or self.key or DEFAULT_KEY)

    def queue(self, **props: Any) -> str:
        """A fresh queue with a unique name."""
        name = f"q{next(_names)}"
        self.engine.create_queue(name, **props)
        return name

    def seed(self, entity: str, *bodies: str, **fields: Any) -> list[int]:
        """Put messages straight into the store (faster than opening an SDK sender)."""
        from sbdlq.addresses import parse_entity
        from sbdlq.models import OutboundMessage

        messages = [OutboundMessage(body=b.encode(), **fields) for b in bodies]
        return list(self.engine.send(parse_entity(entity), messages))

    def topic(self, *subscriptions: str, **props: Any) -> str:
        """A fresh topic with the given subscriptions (each receiving everything)."""
        name = f"t{next(_names)}"
        self.engine.create_topic(name)
        for sub in subscriptions:
            self.engine.create_subscription(name, sub, **props)
        return name


def start(store: Path, *, key: str | None = None, **options: Any) -> Emulator:
    """Start serve() in a thread and wait until it listens (options: serve()'s limits, clock)."""
    from sbdlq.emulator.amqp import server
    from sbdlq.emulator.amqp.server import serve
    from sbdlq.emulator.engine import Engine

    clock = SkewClock()
    engine = Engine(store, clock=clock)
    stop = threading.Event()
    ready = threading.Event()
    ports: dict[str, Any] = {}
    errors: list[BaseException] = []

    def on_ready(amqp_port: int, http_port: int | None) -> None:
        ports.update(amqp=amqp_port, http=http_port)
        ready.set()

    def run() -> None:
        try:
            serve(str(store), port=0, http_port=0, key=key, ready=on_ready, stop_event=stop, **options)
        except BaseException as exc:  # surfaced by the fixture
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=run, name="emulator-serve", daemon=True)
    # The listener builds its engine before it is ready: give that engine the test's clock,
    # so a test lets locks lapse by moving the clock instead of sleeping.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server, "Engine", functools.partial(Engine, clock=clock))
        thread.start()
        assert ready.wait(60), "the emulator did not start listening"  # a hang guard
    if errors:
        raise errors[0]
    return Emulator(str(store), ports["amqp"], ports["http"], key, engine, thread, stop, errors, clock)


def finish(emulator: Emulator, *, close_engine: bool = True) -> None:
    """Stop serve() and check it returned cleanly."""
    emulator.stop.set()
    emulator.thread.join(60)  # a hang guard: a busy machine is slow, a stuck stop is stuck
    if close_engine:
        emulator.engine.close()
    assert not emulator.thread.is_alive(), "serve() did not return after stop"
    assert not emulator.errors, emulator.errors


@contextlib.contextmanager
def amqps_port(root: Path) -> Iterator[str | None]:
    """Hold 5671 for a listener, one holder at a time: None while it is free, else why it cannot be had.

    `root` is the pytest run's base temp's parent (`tmp_path_factory.getbasetemp().parent`), the
    same for every xdist worker: the lock file there makes workers take turns. Another program (or
    another pytest run) on the port is found by binding it, and yields the reason to skip with.
    """
    with open(root / "port-5671.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            probe = socket.socket()
            try:
                probe.bind(("127.0.0.1", AMQPS_PORT))
                taken = None
            except OSError as exc:
                taken = f"port {AMQPS_PORT} is taken on this machine ({exc.strerror or exc})"
            finally:
                probe.close()
            yield taken
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
