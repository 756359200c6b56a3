"""A small HTTP proxy for the tests: `CONNECT host:port` tunnels and absolute-form forwarding.

Clients differ in how they go through a proxy to a plain `ws://` or `http://` URL: the sync
SDK's websocket-client always tunnels with CONNECT, aiohttp (async SDK) and requests (admin
client) send the request in absolute form (`GET http://host:port/path`). Both are served:
the tunnel after a `200 Connection established`, the forward by rewriting the request line to
origin form and relaying the rest of the connection unchanged (a WebSocket upgrade included).

Loopback only (it refuses other destinations), a bounded number of connections, and every
request recorded (method, target, the Proxy-Authorization user) for the tests to assert on.
"""

from __future__ import annotations

import base64
import socket
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_HEAD_MAX = 16 * 1024


@dataclass
class Seen:
    """One request the proxy handled."""

    method: str
    target: str
    user: str | None  # the Proxy-Authorization basic user, if any


@dataclass
class ConnectProxy:
    """Start with `start()`, point clients at `url`, `stop()` at the end."""

    credentials: tuple[str, str] | None = None  # required user:password (407 otherwise)
    max_connections: int = 32
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="test-connect-proxy", daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def url(self, user: str | None = None, password: str | None = None) -> str:
        """The proxy's URL, with user:password in it when given."""
        auth = f"{user}:{password}@" if user is not None else ""
        return f"http://{auth}127.0.0.1:{self.port}"

    def start(self) -> ConnectProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                client.close()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            client.settimeout(10)
            head, rest = _read_head(client)
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            headers = [line for line in lines[1:] if line]
            user = self._user(headers)
            self.seen.append(Seen(method, target, user))
            if self.credentials is not None and user != self.credentials[0] + "\0" + self.credentials[1]:
                client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                return
            host, port, path = _destination(method, target)
            if host not in _LOOPBACK:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            upstream = socket.create_connection((host, port), timeout=10)
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                kept = [h for h in headers if not h.lower().startswith("proxy-")]
                upstream.sendall(("\r\n".join([f"{method} {path} {version}", *kept]) + "\r\n\r\n").encode("latin-1"))
            upstream.sendall(rest)
            _pipe(client, upstream)
        except (OSError, ValueError):
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    sock.close()
            self._slots.release()

    @staticmethod
    def _user(headers: list[str]) -> str | None:
        """`user\\0password` from Proxy-Authorization: Basic (NUL-joined so a test can compare both)."""
        for line in headers:
            name, _, value = line.partition(":")
            if name.strip().lower() == "proxy-authorization" and value.strip().lower().startswith("basic "):
                decoded = base64.b64decode(value.strip()[6:]).decode("utf-8")
                return decoded.replace(":", "\0", 1)
        return None


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The request head (up to the blank line) and whatever arrived after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk or len(data) > _HEAD_MAX:
            raise ValueError("no request head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _destination(method: str, target: str) -> tuple[str, int, str]:
    """host, port and origin-form path of a CONNECT authority or an absolute-form URL."""
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return host.strip("[]"), int(port), ""
    url = urlsplit(target)
    path = url.path or "/"
    return url.hostname or "", url.port or 80, path + (f"?{url.query}" if url.query else "")


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Relay both ways until either side closes."""
    a.settimeout(None)
    b.settimeout(None)

    def one_way(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    other = threading.Thread(target=one_way, args=(b, a), daemon=True)
    other.start()
    one_way(a, b)
    other.join(10)
