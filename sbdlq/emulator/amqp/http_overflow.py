"""What the HTTP side does with a connection that finds every request slot taken: `/health` still answers.

A slowloris (many connections trickling header bytes) can hold every slot until each one's
header deadline. A connection that comes then is not closed at once: one thread watches such
connections (a selector, no thread or slot each) for a short while. A complete `GET /health`
request is answered from there (the same reply as a slot's, after the same Host check); any
other request, or one that has not arrived in time, is closed as before. So a health check,
or a supervisor's liveness probe, keeps working under that load.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from email.parser import BytesHeaderParser

log = logging.getLogger(__name__)

#: Connections waiting here at once; past that, new ones are closed at once (as before).
OVERFLOW_MAX = 256
#: How long one has to send its whole request line and headers.
OVERFLOW_DEADLINE_S = 2.0
#: The most a request's line and headers may take here.
HEAD_MAX_BYTES = 8 * 1024
#: What a health request starts with (then a space, a query, or a slash and either).
HEALTH_START = b"GET /health"

#: The health reply's body for a request's headers, or None to refuse it (a foreign Host).
HealthReply = Callable[[dict[str, str]], bytes | None]


class Overflow:
    """One thread, a selector, and the connections that found no slot (see the module's docstring)."""

    def __init__(self, health: HealthReply) -> None:
        self.health = health
        self.selector = selectors.DefaultSelector()
        self.pending: dict[socket.socket, tuple[float, bytearray]] = {}
        self.lock = threading.Lock()  # guards pending and the selector against take()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sbdlq-emulator-http-overflow", daemon=True)
        self.thread.start()

    def take(self, sock: socket.socket) -> None:
        """Watch a connection that found no slot; closed at once when too many wait already."""
        with self.lock:
            if len(self.pending) >= OVERFLOW_MAX or self.stopped.is_set():
                _close(sock)
                return
            sock.setblocking(False)
            self.pending[sock] = (time.monotonic() + OVERFLOW_DEADLINE_S, bytearray())
            self.selector.register(sock, selectors.EVENT_READ)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=2)
        with self.lock:
            for sock in list(self.pending):
                self._drop(sock)
            self.selector.close()

    def _run(self) -> None:
        while not self.stopped.is_set():
            with self.lock:
                watched = bool(self.pending)
            if not watched:
                self.stopped.wait(0.05)
                continue
            for key, _ in self.selector.select(timeout=0.1):
                self._read(key.fileobj)  # type: ignore[arg-type]
            now = time.monotonic()
            with self.lock:
                for sock in [s for s, (deadline, _) in self.pending.items() if deadline <= now]:
                    self._drop(sock)

    def _read(self, sock: socket.socket) -> None:
        with self.lock:
            entry = self.pending.get(sock)
        if entry is None:
            return
        head = entry[1]
        try:
            data = sock.recv(HEAD_MAX_BYTES + 1 - len(head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        head += data
        if not data or not _may_be_health(bytes(head[: len(HEALTH_START) + 2])) or len(head) > HEAD_MAX_BYTES:
            with self.lock:
                self._drop(sock)  # not a health check: refused as before
            return
        end = head.find(b"\r\n\r\n")
        if end < 0:
            return  # more to come
        with self.lock:
            self.selector.unregister(sock)
            del self.pending[sock]
        self._answer(sock, bytes(head[: end + 4]))

    def _answer(self, sock: socket.socket, head: bytes) -> None:
        """Reply to a complete health request (small: one non-blocking send), then close."""
        _line, _, rest = head.partition(b"\r\n")
        headers = {k.lower(): v for k, v in BytesHeaderParser().parsebytes(rest).items()}
        body = self.health(headers)
        if body is None:
            status, body = b"403 Forbidden", b""
        else:
            status = b"200 OK"
        reply = (
            b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        with contextlib.suppress(OSError):
            sock.setblocking(True)
            sock.settimeout(1.0)
            sock.sendall(reply)
        _close(sock)

    def _drop(self, sock: socket.socket) -> None:
        """Forget and close a watched connection; the caller holds the lock."""
        if self.pending.pop(sock, None) is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(sock)
        _close(sock)


def _may_be_health(start: bytes) -> bool:
    """Whether a request's first bytes are, or may still become, `GET /health` (`/health/`, `?...`)."""
    if len(start) <= len(HEALTH_START):
        return HEALTH_START.startswith(start)
    rest = start[len(HEALTH_START) :]
    return start.startswith(HEALTH_START) and (rest[:1] in (b" ", b"?") or rest in (b"/", b"/ ", b"/?"))


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
