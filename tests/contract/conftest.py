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
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.models import Counts, EntityInfo, Message, OutboundMessage
from sbdlq.paths import Address, EntityPath, SubQueue, parse_address, parse_entity

T = TypeVar("T")

BackendFactory = Callable[[Path], AbstractContextManager[Backend]]
SERVICEBUS = "servicebus"
#: The servicebus contract runs against a listener started with this key (`serve --key`):
#: every link, dead-letter receivers included, must pass the listener's token checks.
SERVICEBUS_KEY = "SAS_KEY_VALUE"


@contextmanager
def _emulator_backend(store: Path) -> Iterator[Backend]:
    from sbdlq.backends.emulator import EmulatorBackend

    yield EmulatorBackend(str(store))


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
    assert ready.wait(10), "the emulator listener did not start"
    try:
        yield ports[0]
    finally:
        stop.set()
        thread.join(10)


def _servicebus(amqp: int, http: int) -> Backend:
    """ServiceBusBackend on a listener's AMQP and HTTP (admin) ports."""
    from sbdlq.backends.servicebus import ServiceBusBackend

    conn = (
        f"Endpoint=sb://127.0.0.1:{amqp};SharedAccessKeyName=RootManageSharedAccessKey;"
        f"SharedAccessKey={SERVICEBUS_KEY};UseDevelopmentEmulator=true;"
    )
    return ServiceBusBackend(connection_string=conn, timeout_s=10, admin_port=http)


@contextmanager
def _servicebus_backend(store: Path) -> Iterator[Backend]:
    """ServiceBusBackend over a listener of its own on the store (the fixtures share one instead)."""
    with _listener(store, SERVICEBUS_KEY) as (amqp, http):
        yield _servicebus(amqp, http)


class ServiceBusSession:
    """One listener, event loop and ServiceBusBackend for every servicebus test of the session."""

    def __init__(self, root: Path) -> None:
        self.store = root / "contract.db"
        Engine(self.store).close()
        self._listening = _listener(self.store, SERVICEBUS_KEY)
        amqp, http = self._listening.__enter__()
        self.loop = asyncio.new_event_loop()
        self.backend = _servicebus(amqp, http)

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


class Seeder:
    """Sets up entities and messages through the engine of the store under test."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def queue(self, name: str = "q", **props: Any) -> EntityPath:
        """A queue (properties as Engine.create_queue takes them)."""
        self.engine.create_queue(name, **props)
        return EntityPath(name)

    def topic(self, name: str = "t", *subscriptions: str, rules: list[Rule] | None = None, **props: Any) -> EntityPath:
        """A topic with subscriptions that each take everything (or the given rules)."""
        self.engine.create_topic(name)
        for sub in subscriptions:
            self.engine.create_subscription(name, sub, rules=rules, **props)
        return EntityPath(name)

    @staticmethod
    def msgs(n: int, prefix: str = "m", start: int = 0, **fields: Any) -> list[OutboundMessage]:
        """n outbound messages with ids and bodies `<prefix><i>`."""
        return [
            OutboundMessage(body=f"{prefix}{i}".encode(), message_id=f"{prefix}{i}", **fields)
            for i in range(start, start + n)
        ]

    def send(self, entity: str, messages: Sequence[OutboundMessage]) -> list[int]:
        """Send through the engine."""
        return self.engine.send(entity, messages)

    def dead_letter(
        self,
        entity: str,
        n: int = 1,
        *,
        reason: str = "Bad",
        description: str = "it broke",
        prefix: str = "m",
        start: int = 0,
        messages: Sequence[OutboundMessage] | None = None,
        **fields: Any,
    ) -> list[Message]:
        """Send messages to a queue (or a subscription's topic), receive and dead-letter them.

        The entity's main queue should hold nothing else; returns the new DLQ messages.
        """
        out = list(messages) if messages is not None else self.msgs(n, prefix, start, **fields)
        path = parse_entity(entity)
        self.send(path.name, out)
        main = Address(path)
        got = self.engine.receive(main, len(out))
        assert len(got) == len(out), "seeding expects an otherwise empty main queue"
        assert self.engine.dead_letter(main, [m.lock_token for m in got if m.lock_token], reason, description) == []
        wanted = {m.message_id for m in out}
        return [m for m in self.dlq(entity) if m.message_id in wanted]

    def transfer_dead_letter(self, name: str, n: int = 1, prefix: str = "x") -> EntityPath:
        """A queue forwarding to a missing entity, so n messages land in its transfer DLQ."""
        self.queue(name, forward_to="nowhere")
        self.send(name, self.msgs(n, prefix))
        return EntityPath(name)

    def dlq(self, entity: str, sub_queue: SubQueue = SubQueue.DEAD_LETTER) -> list[Message]:
        """Everything in the DLQ, peeked through the engine."""
        return self.engine.peek(Address(parse_entity(entity), sub_queue), 0, 100_000)

    def active(self, entity: str) -> list[Message]:
        """Everything in the main queue, peeked through the engine."""
        return self.engine.peek(parse_address(entity), 0, 100_000)

    def counts(self, entity: str) -> Counts:
        return self.engine.counts(entity)


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
def engine(store: Path) -> Iterator[Engine]:
    """The store's engine with the wall clock, as another process would see it."""
    eng = Engine(store)
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture
def seed(engine: Engine) -> Seeder:
    return Seeder(engine)


@pytest.fixture
def aio(request: pytest.FixtureRequest) -> Iterator[Callable[[Awaitable[T]], T]]:
    """Run coroutines on one event loop for the whole test (SDK clients are bound to theirs)."""
    if _param(request) == SERVICEBUS:
        session: ServiceBusSession = request.getfixturevalue("servicebus_session")
        yield session.loop.run_until_complete  # type: ignore[misc]
        return
    loop = asyncio.new_event_loop()
    try:
        yield loop.run_until_complete  # type: ignore[misc]
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(request: pytest.FixtureRequest, store: Path, engine: Engine, aio: Any) -> Iterator[Backend]:
    """A backend on the test's store (the engine fixture creates the store first)."""
    if request.param == SERVICEBUS:
        session: ServiceBusSession = request.getfixturevalue("servicebus_session")
        yield session.backend  # closed with the session: its links serve the next test too
        return
    with BACKEND_FACTORIES[request.param](store) as b:
        try:
            yield b
        finally:
            aio(b.close())


class Spy(Backend):
    """Wraps a backend: records calls, and lets a test slow down or break a primitive."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[str] = []
        self.before_send: Callable[[EntityPath, Sequence[OutboundMessage]], Awaitable[None]] | None = None
        self.after_send: Callable[[EntityPath, Sequence[OutboundMessage]], Awaitable[None]] | None = None
        self.sent: list[OutboundMessage] = []
        # Messages between the start of their send and the end of their complete.
        self.in_flight = 0
        self.max_in_flight = 0
        self.renewed: list[str] = []
        self.completed: list[int] = []

    async def list_entities(self) -> list[EntityInfo]:
        self.calls.append("list_entities")
        return await self.inner.list_entities()

    async def get_entity(self, entity: EntityPath) -> EntityInfo:
        self.calls.append("get_entity")
        return await self.inner.get_entity(entity)

    async def counts(self, entity: EntityPath) -> Counts:
        self.calls.append("counts")
        return await self.inner.counts(entity)

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        self.calls.append("peek")
        return await self.inner.peek(address, from_sequence, max_count)

    async def receive(
        self, address: Address, max_count: int, *, mode: ReceiveMode = ReceiveMode.PEEK_LOCK, max_wait_s: float = 1.0
    ) -> list[Message]:
        self.calls.append("receive")
        return await self.inner.receive(address, max_count, mode=mode, max_wait_s=max_wait_s)

    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        self.calls.append("complete")
        try:
            lost = await self.inner.complete(address, messages)
        finally:
            if address.sub_queue is not SubQueue.NONE:
                self.in_flight -= len(messages)
        self.completed += [m.sequence_number for m in messages if m not in lost]
        return lost

    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        self.calls.append("abandon")
        return await self.inner.abandon(address, messages)

    async def dead_letter(
        self, address: Address, messages: Sequence[Message], reason: str, description: str
    ) -> list[Message]:
        self.calls.append("dead_letter")
        return await self.inner.dead_letter(address, messages, reason, description)

    async def renew_locks(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        self.calls.append("renew_locks")
        self.renewed += [m.lock_token for m in messages if m.lock_token]
        return await self.inner.renew_locks(address, messages)

    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        self.calls.append("send")
        self.in_flight += len(messages)
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        ok = False
        try:
            if self.before_send:
                await self.before_send(entity, messages)
            await self.inner.send(entity, messages)
            ok = True
        finally:
            if not ok:
                self.in_flight -= len(messages)
        self.sent += messages
        if self.after_send:
            await self.after_send(entity, messages)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture
def spy(backend: Backend) -> Spy:
    return Spy(backend)
