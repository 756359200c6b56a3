"""AMQP over WebSockets on the emulator's HTTP port (subprotocol `AMQPWSB10`, path `/$servicebus/websocket`).

The Service Bus SDKs put the AMQP byte stream in binary WebSocket messages (RFC 6455); frame
boundaries mean nothing. After the upgrade, this module relays the stream to the emulator's
own AMQP listener over loopback TCP, so every pre-auth limit of the driver and guard (admission
timeout, connection cap, frame and request sizes) holds for WebSocket clients exactly as for
TCP ones. The relay never holds more than one chunk per direction: a WebSocket frame of any
declared length is streamed through in pieces, never buffered whole.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import socket
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from io import BufferedIOBase
from typing import Any
from urllib.parse import unquote

log = logging.getLogger(__name__)

PATH = "/$servicebus/websocket"
SUBPROTOCOL = "AMQPWSB10"
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
_CHUNK = 64 * 1024
_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_CONTROL_MAX = 125  # RFC 6455 §5.5: control frames carry at most 125 bytes


class HandshakeRefused(Exception):
    """The upgrade request is not one an AMQP WebSocket client sends; the text is the HTTP reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def is_upgrade(path: str, headers: Any) -> bool:
    """Whether a GET asks for the AMQP WebSocket endpoint (anything else stays plain HTTP)."""
    upgrade = str(headers.get("Upgrade") or "")
    return unquote(path.split("?", 1)[0]).rstrip("/") == PATH and upgrade.lower() == "websocket"


def accept_key(client_key: str) -> str:
    """Sec-WebSocket-Accept for a client's Sec-WebSocket-Key."""
    digest = hashlib.sha1((client_key.strip() + _GUID).encode("ascii")).digest()
    return base64.b64encode(digest).decode("ascii")


def check_handshake(headers: Any) -> str:
    """The Sec-WebSocket-Accept value; HandshakeRefused when the request is not AMQP over WebSockets."""
    get = headers.get
    if (get("Sec-WebSocket-Version") or "").strip() != "13":
        raise HandshakeRefused(426, "only WebSocket version 13 is supported")
    key = (get("Sec-WebSocket-Key") or "").strip()
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError(key)
    except ValueError:
        raise HandshakeRefused(400, "Sec-WebSocket-Key must be 16 bytes in base64")
    offered = [p.strip() for p in (get("Sec-WebSocket-Protocol") or "").split(",")]
    if SUBPROTOCOL not in offered:
        raise HandshakeRefused(400, f"the subprotocol {SUBPROTOCOL} is required")
    return accept_key(key)


def frame_header(opcode: int, length: int) -> bytes:
    """A final, unmasked (server-to-client) frame header for a payload of length bytes."""
    first = 0x80 | opcode
    if length < 126:
        return struct.pack("!BB", first, length)
    if length < 1 << 16:
        return struct.pack("!BBH", first, 126, length)
    return struct.pack("!BBQ", first, 127, length)


class _Closed(Exception):
    """The WebSocket side ended (close frame, EOF or a protocol error)."""


def _read_exact(rfile: BufferedIOBase, n: int) -> bytes:
    data = rfile.read(n)
    if data is None or len(data) < n:
        raise _Closed("end of stream")
    return data


def _unmask(data: bytes, mask: bytes, offset: int) -> bytes:
    """data XOR the 4-byte mask, starting at payload position offset."""
    if not data:
        return data
    rolled = mask[offset % 4 :] + mask[: offset % 4]
    key = (rolled * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(len(data), "big")


class Relay:
    """One upgraded WebSocket connection relayed to the AMQP listener until either side ends."""

    def __init__(self, rfile: BufferedIOBase, ws: socket.socket, amqp: socket.socket, name: str) -> None:
        self.rfile = rfile
        self.ws = ws
        self.amqp = amqp
        self.name = name
        self.send_lock = threading.Lock()  # data and pong frames share the socket

    def run(self) -> None:
        """Relay both directions; returns when the client or the listener closes."""
        back = threading.Thread(target=self._amqp_to_ws, name="sbdlq-emulator-ws-out", daemon=True)
        back.start()
        try:
            self._ws_to_amqp()
        except (_Closed, OSError) as exc:
            log.debug("emulator ws: %s: %s", self.name, exc)
        finally:
            _shut(self.amqp)
            back.join(timeout=5)
            _shut(self.ws)

    def _send(self, opcode: int, payload: bytes) -> None:
        with self.send_lock:
            self.ws.sendall(frame_header(opcode, len(payload)) + payload)

    def _ws_to_amqp(self) -> None:
        while True:
            head = _read_exact(self.rfile, 2)
            opcode, masked, length = head[0] & 0x0F, head[1] & 0x80, head[1] & 0x7F
            if length == 126:
                length = struct.unpack("!H", _read_exact(self.rfile, 2))[0]
            elif length == 127:
                length = struct.unpack("!Q", _read_exact(self.rfile, 8))[0]
            if not masked:
                raise _Closed("client frame not masked (RFC 6455 §5.1)")
            mask = _read_exact(self.rfile, 4)
            if opcode in (_BINARY, _CONTINUATION):
                self._stream(length, mask)
            elif opcode >= _CLOSE and length > _CONTROL_MAX:
                raise _Closed("control frame over 125 bytes")
            elif opcode == _PING:
                self._send(_PONG, _unmask(_read_exact(self.rfile, length), mask, 0))
            elif opcode == _PONG:
                _read_exact(self.rfile, length)
            elif opcode == _CLOSE:
                _read_exact(self.rfile, length)
                self._close(1000)
                raise _Closed("client closed")
            else:  # text or reserved: AMQP travels in binary messages only
                self._close(1003)
                raise _Closed(f"unsupported opcode {opcode}")

    def _stream(self, length: int, mask: bytes) -> None:
        """Move one data frame's payload to the listener in chunks (never buffered whole)."""
        done = 0
        while done < length:
            chunk = _read_exact(self.rfile, min(_CHUNK, length - done))
            self.amqp.sendall(_unmask(chunk, mask, done))
            done += len(chunk)

    def _amqp_to_ws(self) -> None:
        try:
            while True:
                data = self.amqp.recv(_CHUNK)
                if not data:
                    break
                self._send(_BINARY, data)
            self._close(1000)
        except OSError as exc:
            log.debug("emulator ws: %s: listener side: %s", self.name, exc)
        finally:
            _shut(self.ws)  # wakes the reading side

    def _close(self, code: int) -> None:
        try:
            self._send(_CLOSE, struct.pack("!H", code))
        except OSError:
            pass


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def connect_listener(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to the emulator's AMQP listener (a wildcard bind is reached on loopback)."""
    target = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1", "": "127.0.0.1"}.get(host, host.strip("[]"))
    sock = socket.create_connection((target, port), timeout=timeout)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def serve_upgrade(
    handler: BaseHTTPRequestHandler,
    *,
    host: str,
    amqp_port: int,
    timeout: float,
    upgraded: Callable[[], None] = lambda: None,
) -> None:
    """Answer an upgrade request on handler's connection, then relay it until it ends (`upgraded`: once switched)."""
    handler.close_connection = True  # after the relay, this HTTP connection is spent
    try:
        accept = check_handshake(handler.headers)
        amqp = connect_listener(host, amqp_port, timeout)
    except HandshakeRefused as exc:
        handler.send_error(exc.status, exc.reason)
        return
    except OSError as exc:
        handler.send_error(503, f"the AMQP listener is not reachable: {exc.strerror or exc}")
        return
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept)
    handler.send_header("Sec-WebSocket-Protocol", SUBPROTOCOL)
    handler.end_headers()
    handler.wfile.flush()
    # From here the listener's admission timeout bounds a silent client, not the HTTP read timeout.
    handler.connection.settimeout(None)
    name = f"{handler.client_address[0]}:{handler.client_address[1]}"
    log.debug("emulator ws: %s upgraded", name)
    upgraded()
    Relay(handler.rfile, handler.connection, amqp, name).run()
