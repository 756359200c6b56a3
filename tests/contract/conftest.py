"""Contract fixtures: the same tests run against every backend over one emulator store.

`backend` is parametrized over BACKEND_FACTORIES. Each test gets a store of its own (an
empty one) and a Backend that reads and writes that store; the `seed` helper sets up
entities and dead-letters messages through the engine of the same store, so a test sees
exactly what a broker would show a client.

The real SDK backend, `servicebus`, runs ServiceBusBackend (azure-servicebus) against
`sbdlq emulator serve` on the store. It runs by default wherever proton is importable (CI
builds it); SBDLQ_CONTRACT_BACKENDS picks the backends explicitly
(`SBDLQ_CONTRACT_BACKENDS=emulator` or `=emulator,servicebus`). Opening an SDK link costs
about half a second (its handshake polls every 50 ms), so one listener, one event loop and
one ServiceBusBackend serve the whole session and keep their links: each test's store is
the same file emptied first (`Engine.reset`), which to a client is a fresh namespace.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from support import VirtualTime
from support.spy import Spy

from sbdlq.backends.base import Backend
from sbdlq.emulator.engine import Engine

T = TypeVar("T")

BackendFactory = Callable[..., AbstractContextManager[Backend]]
SERVICEBUS = "servicebus"
#: The servicebus contract runs against a listener started with this key (`serve --key`):
#: every link, dead-letter receivers included, must pass the listener's token checks.
SERVICEBUS_KEY = "SAS_KEY_VALUE"


@contextmanager
def _emulator_backend(store: Path, clock: Callable[[], float] | None = None) -> Iterator[Backend]:
    from sbdlq.backends.emulator import EmulatorBackend

    yield EmulatorBackend(str(store), clock=clock)


@contextmanager
def _listener(store: Path, key: str | None = None) -> Iterator[tuple[int, int]]:
    """`sbdlq emulator serve` on the store, in a thread on free ports; yields its AMQP and HTTP ports."""
    from sbdlq.emulator.amqp.server import serve

    stop = threading.Event()
    ready = threading.Event()
    ports: list[tuple[int, int]] = []

    def on_ready(amqp_port: int, http_port: int | None) -> None:
        assert http_port is not None
        ports.append((amqp_port, http_port))
        ready.set()

    thread = threading.Thread(
        target=serve,
        kwargs={"store_path": str(store), "port": 0, "http_port": 0, "key": key, "ready": on_ready, "stop_event": stop},
        daemon=True,
    )
    thread.start()
    assert ready.wait(60), "the emulator listener did not start"  # a hang guard
    try:
        yield ports[0]
    finally:
        stop.set()
        thread.join(60)  # a hang guard


def _servicebus(amqp: int, http: int) -> Backend:
    """ServiceBusBackend on a listener's AMQP and HTTP (admin) ports."""
    from sbdlq.backends.servicebus import ServiceBusBackend

    conn = (
        f"Endpoint=sb://127.0.0.1:{amqp};SharedAccessKeyName=RootManageSharedAccessKey;"
        f"SharedAccessKey={SERVICEBUS_KEY};UseDevelopmentEmulator=true;"
    )
    return ServiceBusBackend(connection_string=conn, timeout_s=10, admin_port=http)


@contextmanager
def _servicebus_backend(store: Path, clock: Callable[[], float] | None = None) -> Iterator[Backend]:
    """ServiceBusBackend over a listener of its own on the store (the fixtures share one instead)."""
    with _listener(store, SERVICEBUS_KEY) as (amqp, http):
        yield _servicebus(amqp, http)


class ServiceBusSession:
    """One listener, event loop and ServiceBusBackend for every servicebus test of the session."""

    def __init__(self, root: Path) -> None:
        self.store = root / "contract.db"
        Engine(self.store).close()
        self._listening = _listener(self.store, SERVICEBUS_KEY)
        self.ports = self._listening.__enter__()
        self.loop = asyncio.new_event_loop()
        self.backend = _servicebus(*self.ports)
        # Without the SDK shortcuts (SBDLQ_SDK_SHORTCUTS=off) a receiver keeps the credit a
        # receive left unused, so one test's links would take the next test's messages: then
        # each test gets a backend of its own, as each run of sbdlq has.
        from sbdlq.backends.servicebus.shortcuts import Shortcuts

        self.shares_links = Shortcuts.resolve(None).enabled

    def next_backend(self) -> None:
        """After a test: a new backend, where links may not serve the next test."""
        if not self.shares_links:
            self.loop.run_until_complete(self.backend.close())
            self.backend = _servicebus(*self.ports)

    def fresh_store(self) -> Path:
        """The store, emptied: no entity, no message, as a new namespace."""
        with Engine(self.store) as engine:
            engine.reset()
        return self.store

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.backend.close())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()
            self._listening.__exit__(None, None, None)


def _proton_available() -> bool:
    """Whether `sbdlq emulator serve` can run here (python-qpid-proton is an optional extra)."""
    return importlib.util.find_spec("proton") is not None


#: The backends the contract runs on. Add one here (a factory from a store path to a
#: Backend on that store) and every contract test runs on it too.
ALL_BACKEND_FACTORIES: dict[str, BackendFactory] = {
    "emulator": _emulator_backend,
    SERVICEBUS: _servicebus_backend,
}
DEFAULT_BACKENDS = "emulator,servicebus" if _proton_available() else "emulator"
BACKEND_FACTORIES: dict[str, BackendFactory] = {
    name.strip(): ALL_BACKEND_FACTORIES[name.strip()]
    for name in os.environ.get("SBDLQ_CONTRACT_BACKENDS", DEFAULT_BACKENDS).split(",")
    if name.strip()
}


def _param(request: pytest.FixtureRequest) -> str | None:
    """The backend a test runs on (None for a test without the `backend` parameter)."""
    callspec = getattr(request.node, "callspec", None)
    return callspec.params.get("backend") if callspec is not None else None


@pytest.fixture(scope="session")
def servicebus_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceBusSession]:
    """The shared listener and ServiceBusBackend, started by the first servicebus test."""
    session = ServiceBusSession(tmp_path_factory.mktemp("servicebus"))
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """An empty store for the test."""
    if _param(request) == SERVICEBUS:
        session: ServiceBusSession = request.getfixturevalue("servicebus_session")
        return session.fresh_store()
    return tmp_path / "contract.db"


@pytest.fixture
def virtual_time(request: pytest.FixtureRequest) -> Iterator[VirtualTime | None]:
    """Virtual time for the in-process backends; None where a real broker serves real sockets."""
    if _param(request) == SERVICEBUS:
        yield None
        return
    vt = VirtualTime(start=time.time())
    try:
        with vt.patched():
            yield vt
    finally:
        vt.close()


@pytest.fixture
def broker_clock(virtual_time: VirtualTime | None) -> Callable[[], float] | None:
    """The seeding engine and the emulator backend read the same (virtual) clock."""
    return virtual_time.wall if virtual_time is not None else None


@pytest.fixture
def aio(request: pytest.FixtureRequest, virtual_time: VirtualTime | None) -> Callable[[Awaitable[T]], T]:
    """Run coroutines on one event loop for the whole test (SDK clients are bound to theirs)."""
    if virtual_time is not None:
        return virtual_time.run  # type: ignore[return-value]
    session: ServiceBusSession = request.getfixturevalue("servicebus_session")
    return session.loop.run_until_complete  # type: ignore[return-value]


@pytest.fixture
def short_lock_s(virtual_time: VirtualTime | None) -> float:
    """A lock duration for a test to outlast: 1 s on virtual time. The servicebus backend's
    broker and lock keeper run on the wall clock, in this busy process: there 3 s, so that
    renewing at half the duration leaves a late renewal 1.5 s, not 0.5 s, before the lock lapses."""
    return 1.0 if virtual_time is not None else 3.0


@pytest.fixture
def pause(aio: Callable[[Awaitable[Any]], Any]) -> Callable[[float], None]:
    """Let broker time pass: instantly on virtual time; for the SDK backend, a real wait,
    because its broker is a listener thread on the wall clock serving real sockets."""

    def wait(seconds: float) -> None:
        aio(asyncio.sleep(seconds))

    return wait


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(
    request: pytest.FixtureRequest, store: Path, engine: Engine, aio: Any, broker_clock: Callable[[], float] | None
) -> Iterator[Backend]:
    """A backend on the test's store (the engine fixture creates the store first)."""
    if request.param == SERVICEBUS:
        session: ServiceBusSession = request.getfixturevalue("servicebus_session")
        yield session.backend  # closed with the session: its links serve the next test too
        session.next_backend()
        return
    with BACKEND_FACTORIES[request.param](store, clock=broker_clock) as b:
        try:
            yield b
        finally:
            aio(b.close())


@pytest.fixture
def spy(backend: Backend) -> Spy:
    return Spy(backend)
