"""AMQP over WebSockets on the emulator's HTTP port (subprotocol `AMQPWSB10`, path `/$servicebus/websocket`).

The Service Bus SDKs put the AMQP byte stream in binary WebSocket messages (RFC 6455); frame
boundaries mean nothing. After the upgrade, this module relays the stream to the emulator's
own AMQP listener over loopback TCP, so every pre-auth limit of the driver and guard (admission
timeout, connection cap, frame and request sizes) holds for WebSocket clients exactly as for
TCP ones. The relay never holds more than about one chunk per direction: a WebSocket frame
of any declared length is streamed through in pieces, never buffered whole. Each relay is one
thread over non-blocking sockets (wss: a TLS socket must never be used by two threads at once).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import selectors
import socket
import ssl
import struct
import threading
import time
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


def _unmask(data: bytes, mask: bytes, offset: int) -> bytes:
    """data XOR the 4-byte mask, starting at payload position offset."""
    if not data:
        return data
    rolled = mask[offset % 4 :] + mask[: offset % 4]
    key = (rolled * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(len(data), "big")


def _header(buf: bytearray) -> tuple[int, int, bytes, int] | None:
    """A client frame's (opcode, payload length, mask, header size) once buf holds its header."""
    if len(buf) < 2:
        return None
    opcode, masked, length = buf[0] & 0x0F, buf[1] & 0x80, buf[1] & 0x7F
    size = 2 + {126: 2, 127: 8}.get(length, 0)
    if len(buf) < size + 4:
        return None
    if length == 126:
        length = struct.unpack_from("!H", buf, 2)[0]
    elif length == 127:
        length = struct.unpack_from("!Q", buf, 2)[0]
    if not masked:
        raise _Closed("client frame not masked (RFC 6455 §5.1)")
    return opcode, length, bytes(buf[size : size + 4]), size + 4


#: How long the relay, ending, keeps trying to hand over what it still holds (a close frame).
_FLUSH_S = 5.0
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class Relay:
    """One upgraded WebSocket connection relayed to the AMQP listener until either side ends.

    One thread, both sockets non-blocking, a selector between them: a TLS socket (wss) is
    never read in one thread while written or shut down in another (OpenSSL's SSL object is
    not safe for that, and a shutdown under a reader failed in that reader). Each direction
    holds at most about one chunk: a side is read only while the other has room.
    """

    def __init__(self, rfile: BufferedIOBase, ws: socket.socket, amqp: socket.socket, name: str) -> None:
        self.rfile = rfile
        self.ws = ws
        self.amqp = amqp
        self.name = name
        self.from_ws = bytearray()  # client bytes not yet parsed into frames
        self.to_amqp = bytearray()
        self.to_ws = bytearray()
        self.frame: list[Any] | None = None  # the client frame being read: [opcode, length, mask, done]
        self.ending: str | None = None  # why the relay ends once what it holds is handed over
        self.ws_retry = 0  # a TLS write to retry with the same length (OpenSSL requires it)
        self.ws_read_waits_write = self.ws_write_waits_read = False  # TLS: each may need the other way

    def run(self) -> None:
        """Relay both directions; returns when the client or the listener closes."""
        try:
            self.ws.setblocking(False)
            self.amqp.setblocking(False)
            self._parse(self._early())
            self._loop()
        except (_Closed, OSError, ValueError) as exc:
            log.debug("emulator ws: %s: %s", self.name, exc)
        finally:
            # This thread alone ever touched the sockets: no reader can be under the shutdown.
            _shut(self.amqp)
            _shut(self.ws)

    def _early(self) -> bytes:
        """What the HTTP reader already buffered past the upgrade request (a client may pipeline)."""
        peek = getattr(self.rfile, "peek", None)
        if peek is None:
            return b""  # an unbuffered reader holds nothing back
        try:
            ahead = peek(1)  # what is buffered (one non-blocking read when nothing is)
        except _WOULD_BLOCK:
            return b""  # nothing buffered, nothing on the socket yet
        return self.rfile.read(len(ahead)) if ahead else b""  # from the buffer alone

    def _loop(self) -> None:
        selector = selectors.DefaultSelector()
        deadline: float | None = None
        try:
            while True:
                if self.ending is not None:
                    if not self.to_ws and not self.to_amqp:
                        raise _Closed(self.ending)
                    deadline = deadline or time.monotonic() + _FLUSH_S
                    if time.monotonic() >= deadline:
                        raise _Closed(f"{self.ending} (could not hand over the rest)")
                self._step()
                ws_events, amqp_events = self._interest()
                _watch(selector, self.ws, ws_events)
                _watch(selector, self.amqp, amqp_events)
                if not ws_events and not amqp_events:
                    raise _Closed(self.ending or "nothing left to relay")
                pending = getattr(self.ws, "pending", None)
                ready_now = ws_events & selectors.EVENT_READ and pending is not None and pending() > 0
                wait = 0.0 if ready_now else (None if deadline is None else max(0.0, deadline - time.monotonic()))
                selector.select(wait)
        finally:
            selector.close()

    def _interest(self) -> tuple[int, int]:
        """What to wait for on each socket: a side is read only while the other has room."""
        read, write = selectors.EVENT_READ, selectors.EVENT_WRITE
        reading = self.ending is None
        ws = amqp = 0
        if (reading and len(self.to_amqp) < _CHUNK) or self.ws_write_waits_read:
            ws |= read
        if self.to_ws or self.ws_read_waits_write:
            ws |= write
        if reading and len(self.to_ws) < _CHUNK:
            amqp |= read
        if self.to_amqp:
            amqp |= write
        return ws, amqp

    def _step(self) -> None:
        """Every move that can be made now, none of them blocking (what is read is passed on at once)."""
        if self.to_ws or self.ws_retry:
            self._write_ws()
        if self.to_amqp:
            self._write_amqp()
        if self.ending is None and (len(self.to_amqp) < _CHUNK or self.ws_write_waits_read):
            self._read_ws()
            if self.to_amqp:
                self._write_amqp()
        if self.ending is None and len(self.to_ws) < _CHUNK:
            self._read_amqp()
            if self.to_ws:
                self._write_ws()

    def _read_ws(self) -> None:
        try:
            data = self.ws.recv(_CHUNK)
        except ssl.SSLWantWriteError:
            self.ws_read_waits_write = True
            return
        except _WOULD_BLOCK:
            self.ws_read_waits_write = False
            return
        self.ws_read_waits_write = False
        if not data:
            raise _Closed("end of stream")
        if self.ws_write_waits_read:
            self.ws_write_waits_read = False
        self._parse(data)

    def _write_ws(self) -> None:
        size = self.ws_retry or min(len(self.to_ws), _CHUNK)
        try:
            sent = self.ws.send(self.to_ws[:size])
        except ssl.SSLWantReadError:
            self.ws_retry, self.ws_write_waits_read = size, True
            return
        except _WOULD_BLOCK:
            self.ws_retry = size
            return
        self.ws_retry, self.ws_write_waits_read = 0, False
        del self.to_ws[:sent]

    def _read_amqp(self) -> None:
        try:
            data = self.amqp.recv(_CHUNK)
        except _WOULD_BLOCK:
            return
        except OSError as exc:
            log.debug("emulator ws: %s: listener side: %s", self.name, exc)
            data = b""
        if not data:
            self.to_amqp.clear()  # nobody left to take it
            self._close(1000)
            self.ending = "the listener closed"
            return
        self._send(_BINARY, data)

    def _write_amqp(self) -> None:
        try:
            sent = self.amqp.send(self.to_amqp)
        except _WOULD_BLOCK:
            return
        del self.to_amqp[:sent]

    def _parse(self, data: bytes) -> None:
        """Take in client bytes: data payloads go to the listener as they come (never buffered
        whole), control frames are answered once whole."""
        buf = self.from_ws
        buf += data
        while buf and self.ending is None:
            if self.frame is None:
                head = _header(buf)
                if head is None:
                    return
                opcode, length, mask, size = head
                if opcode >= _CLOSE and length > _CONTROL_MAX:
                    raise _Closed("control frame over 125 bytes")
                del buf[:size]
                self.frame = [opcode, length, mask, 0]
            opcode, length, mask, done = self.frame
            if opcode in (_BINARY, _CONTINUATION):
                take = min(len(buf), length - done)
                self.to_amqp += _unmask(bytes(buf[:take]), mask, done)
                del buf[:take]
                self.frame[3] = done = done + take
                if done < length:
                    return
            elif len(buf) < length:
                return
            else:
                self._control(opcode, _unmask(bytes(buf[:length]), mask, 0))
                del buf[:length]
            self.frame = None

    def _control(self, opcode: int, payload: bytes) -> None:
        if opcode == _PING:
            self._send(_PONG, payload)
        elif opcode == _CLOSE:
            self._close(1000)
            self.ending = "client closed"
        elif opcode != _PONG:  # text or reserved: AMQP travels in binary messages only
            self._close(1003)
            self.ending = f"unsupported opcode {opcode}"

    def _send(self, opcode: int, payload: bytes) -> None:
        self.to_ws += frame_header(opcode, len(payload)) + payload

    def _close(self, code: int) -> None:
        self._send(_CLOSE, struct.pack("!H", code))


def _watch(selector: selectors.BaseSelector, sock: socket.socket, events: int) -> None:
    """Register, change or drop sock's events (a selector takes no empty interest)."""
    key = selector.get_map().get(sock)
    if key is None:
        if events:
            selector.register(sock, events)
    elif not events:
        selector.unregister(sock)
    elif key.events != events:
        selector.modify(sock, events)


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
    thread = threading.current_thread()
    was, thread.name = thread.name, "sbdlq-emulator-ws"
    try:
        Relay(handler.rfile, handler.connection, amqp, name).run()
    finally:
        thread.name = was
