"""wss (`serve --tls`, WebSockets on the HTTPS port): one TLS socket is never used by two threads.

OpenSSL's SSL object is not safe for a read in one thread and a write in another, and the
relay used to do just that: a blocked read of the client while the listener's bytes were
written, and a shutdown of the socket under a reader (`SSLSocket.shutdown` drops its SSL
object: the reader then failed with an AttributeError nothing caught). Many raw wss clients
here send and receive at once (pings answered while the listener writes), some hang up
mid-stream, some close politely, and the listener closes some itself. Every server-side
SSLSocket call is watched for a second thread inside the same socket, and every thread
exception is caught by `threading.excepthook`.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

import raw_amqp
from proton import uint
from support.serve import Emulator, finish, start

from sbdlq.emulator.tls import local_files

CLIENTS = 16
ROUNDS = 20
_HEARTBEAT = b"\x00\x00\x00\x08\x02\x00\x00\x00"  # an empty AMQP frame: the listener takes it silently
_WATCHED = ("recv", "recv_into", "read", "send", "sendall", "write", "shutdown", "unwrap", "pending")


def _ws_frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked frame (what a client sends)."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    if len(payload) < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | len(payload))
    else:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, len(payload))
    return head + mask + masked


class Overlaps:
    """Server-side SSLSocket calls made while another thread was inside the same socket."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside: dict[int, set[int]] = {}  # id(socket) -> threads inside it now
        self.found: list[str] = []
        self.server_sockets: set[int] = set()

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def watched(sock: ssl.SSLSocket, *args: Any, **kwargs: Any) -> Any:
            if not sock.server_side:
                return method(sock, *args, **kwargs)
            me = threading.get_ident()
            with self.lock:
                others = self.inside.setdefault(id(sock), set()) - {me}
                if others:
                    self.found.append(f"{name} while another thread was inside the socket")
                self.inside[id(sock)].add(me)
            try:
                return method(sock, *args, **kwargs)
            finally:
                with self.lock:
                    self.inside[id(sock)].discard(me)

        return watched


@pytest.fixture
def overlaps(monkeypatch: pytest.MonkeyPatch) -> Overlaps:
    seen = Overlaps()
    for name in _WATCHED:
        monkeypatch.setattr(ssl.SSLSocket, name, seen.wrap(name, getattr(ssl.SSLSocket, name)))
    return seen


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    caught: list[str] = []

    def hook(args: threading.ExceptHookArgs) -> None:
        caught.append(f"{args.thread.name if args.thread else '?'}: {args.exc_type.__name__}: {args.exc_value}")

    monkeypatch.setattr(threading, "excepthook", hook)
    return caught


@pytest.fixture
def wss(tmp_path: Path) -> Iterator[tuple[Emulator, ssl.SSLContext]]:
    files = local_files(tmp_path / "tls")
    emu = start(tmp_path / "emulator.db", tls=files, tls_port=0)
    trust = ssl.create_default_context(cafile=str(files.ca))
    yield emu, trust
    finish(emu)


def _upgrade(port: int, trust: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)  # a hang guard
    sock = trust.wrap_socket(raw, server_hostname="localhost")
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET /$servicebus/websocket HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n\r\n"
        ).encode()
    )
    assert b" 101 " in raw_amqp.wait_for(sock, b"\r\n\r\n")
    return sock


def _client(port: int, trust: ssl.SSLContext, ending: str) -> None:
    """Open AMQP over wss, then ping, send heartbeats and begin sessions (the listener answers
    each) all at once; then end as told."""
    sock = _upgrade(port, trust)
    try:
        sock.sendall(_ws_frame(0x2, raw_amqp.sasl_anonymous() + raw_amqp.open_session()))
        for i in range(ROUNDS):
            tag = f"ping-{i}".encode()
            # Pipelined: the relay reads the next frame while it writes the pong and the listener's bytes.
            begin = raw_amqp.frame(raw_amqp.BEGIN, [None, uint(0), uint(1000), uint(1000)], channel=i + 1)
            sock.sendall(_ws_frame(0x9, tag) + _ws_frame(0x2, _HEARTBEAT) + _ws_frame(0x2, begin))
            if ending == "hang-up" and i == ROUNDS // 2:
                return  # mid-stream: the relay is writing to a socket the client is closing
        assert b"ping-" in raw_amqp.wait_for(sock, f"ping-{ROUNDS - 1}".encode())
        if ending == "close":
            sock.sendall(_ws_frame(0x8, struct.pack("!H", 1000)))
            raw_amqp.wait_for(sock, b"\x88\x02\x03\xe8")  # the relay's close frame, code 1000
        elif ending == "listener":
            sock.sendall(_ws_frame(0x2, b"\x00\x00\x00\x08\x07\x00\x00\x00"))  # a frame type AMQP lacks
            raw_amqp.wait_for(sock, b"\x88\x02\x03\xe8")  # the listener closed: the relay says so and ends
    finally:
        sock.close()


def _relays_done(before: set[int]) -> bool:
    return not [t for t in threading.enumerate() if t.ident not in before and t.name.startswith("sbdlq-emulator-ws")]


def test_concurrent_wss_clients_never_share_a_tls_socket_between_threads(
    wss: tuple[Emulator, ssl.SSLContext], overlaps: Overlaps, thread_errors: list[str]
) -> None:
    emu, trust = wss
    before = {t.ident for t in threading.enumerate() if t.ident is not None}
    endings = ("hang-up", "close", "listener", "hang-up")
    failures: list[BaseException] = []

    def one(i: int) -> None:
        try:
            _client(emu.http_port, trust, endings[i % len(endings)])
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    clients = [threading.Thread(target=one, args=(i,), name=f"wss-client-{i}") for i in range(CLIENTS)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(120)  # a hang guard
    assert not failures, failures
    # Every relay ends once its client or the listener did (a hang guard, polled on thread exits).
    done = threading.Event()
    for _ in range(600):
        if _relays_done(before):
            done.set()
            break
        done.wait(0.1)
    assert done.is_set(), "wss relays did not end"
    assert thread_errors == []
    assert overlaps.found == []


def _plain_upgrade(port: int, pipelined: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)  # a hang guard
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        "GET /$servicebus/websocket HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n\r\n"
    )
    sock.sendall(request.encode() + pipelined)
    return sock


def test_the_relay_answers_frames_as_rfc_6455_says(launch: Any) -> None:
    """One thread relays: pings, a large streamed frame, bytes pipelined with the upgrade, and the ends."""
    emu = launch()
    # Frames sent in the same packet as the upgrade request reach the listener too.
    with _plain_upgrade(emu.http_port, _ws_frame(0x2, raw_amqp.sasl_anonymous())) as sock:
        assert b"ANONYMOUS" in raw_amqp.wait_for(sock, b"ANONYMOUS")
        sock.sendall(_ws_frame(0x9, b"are you there"))
        assert b"\x8a\x0dare you there" in raw_amqp.wait_for(sock, b"are you there")
        # A frame far over one chunk, streamed through: the listener answers the open inside it.
        big = raw_amqp.open_session() + _HEARTBEAT * 20_000
        sock.sendall(_big_frame(big))
        assert b"sbdlq-emulator" in raw_amqp.wait_for(sock, b"sbdlq-emulator")
        sock.sendall(_ws_frame(0x1, b"text"))  # AMQP travels in binary frames only
        assert raw_amqp.wait_for(sock, b"\x88\x02\x03\xeb").endswith(b"\x88\x02\x03\xeb")  # close, 1003
    with _plain_upgrade(emu.http_port) as sock:
        raw_amqp.wait_for(sock, b"\r\n\r\n")
        sock.sendall(b"\x82\x05hello")  # not masked: the connection is dropped
        raw_amqp.wait_for(sock, b"never")  # returns once the relay closed
        assert sock.recv(1) == b""


def _big_frame(payload: bytes) -> bytes:
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return struct.pack("!BBQ", 0x82, 0x80 | 127, len(payload)) + mask + masked
