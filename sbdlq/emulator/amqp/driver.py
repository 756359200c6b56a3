"""A single-threaded socket loop that drives proton connections for a listening socket.

Proton's engine (Connection, Transport, Collector) does the AMQP framing; this loop moves
bytes between sockets and transports, hands proton events to a handler, calls the
handler's periodic tick, and stops when asked. Nothing here knows about Service Bus.

A listener may come with an `ssl.SSLContext` (AMQPS): its sockets are wrapped with Python's
`ssl` module, so the bytes this loop moves in and out of proton (and the wire filter) are
plain AMQP either way. Proton's own SSL would sit under the wire filter, which must see frames.
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any, Protocol

from proton import Collector, Condition, Connection, Event, Transport

from .frame_repair import MESSAGE_FORMAT, PLAIN_AUTHORIZED, DeliveryIdRepair
from .handoff import SNIFF_BYTES, is_http

log = logging.getLogger(__name__)

_RECV_CHUNK = 64 * 1024
#: connections over the cap answered with an AMQP close at once (more are reset), and how long
#: such a connection is kept for the client to read it
_REFUSING_SLOTS = 16
_REFUSE_GRACE_S = 2.0
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"


_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


@dataclass(frozen=True, eq=False)
class Listening:
    """A listening socket, and the TLS context its connections are wrapped in (None: plain AMQP).

    With `http`, a connection whose first bytes are an HTTP request is handed to it (the socket,
    those bytes, the client's address) instead of proton: one port for AMQPS and HTTPS.
    """

    sock: socket.socket
    tls: ssl.SSLContext | None = None
    http: Callable[[socket.socket, bytes, Any], None] | None = None


class Handler(Protocol):
    """What the loop calls: proton events, a periodic tick, and the end of a connection."""

    def dispatch(self, event: Event) -> None: ...

    def tick(self) -> None: ...

    def connection_gone(self, connection: Connection) -> None: ...


@dataclass(eq=False)
class _Peer:
    """One accepted socket and the proton transport and connection bound to it."""

    sock: socket.socket
    transport: Transport
    connection: Connection
    name: str
    admit_by: float  # monotonic time by which the handler must have admitted the connection
    deadline: float = 0.0
    events: int = field(default=selectors.EVENT_READ)
    closing_since: float | None = None
    refusing: bool = False  # over the cap: opened and closed with resource-limit-exceeded
    wire: DeliveryIdRepair = field(default_factory=DeliveryIdRepair)
    outbuf: bytearray = field(default_factory=bytearray)
    # Whole frames the wire filter released beyond what the transport could take yet.
    inbuf: bytearray = field(default_factory=bytearray)
    # The first bytes, held until they tell AMQP from HTTP (None: not asked, or told).
    sniff: bytearray | None = None
    listening: Listening | None = None
    address: Any = None


class _Throttled:
    """A log line at most once per interval (floods must not turn into a log per event)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last: dict[str, float] = {}
        self.dropped: dict[str, int] = {}

    def warning(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self.last.get(key, -self.interval) < self.interval:
            self.dropped[key] = self.dropped.get(key, 0) + 1
            return
        more = self.dropped.pop(key, 0)
        self.last[key] = now
        log.warning(message + (f" ({more} more since the last report)" if more else ""), *args)


def _decrypted_rest(sock: ssl.SSLSocket) -> bytes:
    """What TLS already decrypted beyond the first read: select() cannot see it, so take it now
    (the wire filter and inbuf hold it until proton has room)."""
    rest = bytearray()
    try:
        while sock.pending() > 0:
            rest += sock.recv(sock.pending())
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        pass  # what was read so far still goes on: never drop decrypted bytes
    return bytes(rest)


_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


@dataclass(eq=False)
class Driver:
    """Accept connections on a listening socket and run them until stopped.

    At most max_connections at once; a few more are answered with an AMQP open and a close
    carrying `amqp:resource-limit-exceeded` (never shown to the handler), and past those a
    connection is closed on accept. A connection the handler's `admitted` has not accepted
    within admit_timeout seconds is dropped.
    """

    listener: socket.socket
    handler: Handler
    _: KW_ONLY
    #: more listeners served by the same loop (the AMQPS one)
    also: tuple[Listening, ...] = ()
    configure: Callable[[Transport], None] | None = None
    tick_interval: float = 0.25
    admitted: Callable[[Connection], bool] | None = None
    admit_timeout: float = 10.0
    max_connections: int = 1000
    #: whether a SASL PLAIN user name and password are taken (None: PLAIN is passed to proton)
    check_plain: Callable[[str, str], bool] | None = None
    backoff: float = 0.5
    log_interval: InitVar[float] = 10.0
    collector: Collector = field(init=False, default_factory=Collector)
    selector: selectors.BaseSelector = field(init=False, default_factory=selectors.DefaultSelector)
    peers: dict[int, _Peer] = field(init=False, default_factory=dict)
    #: the connections opened only to be closed (over the cap): the handler never sees them
    refused: set[Connection] = field(init=False, default_factory=set)
    accepting_again: float | None = field(init=False, default=None)  # set while backing off from EMFILE
    throttled: _Throttled = field(init=False)
    listening: tuple[Listening, ...] = field(init=False)

    def __post_init__(self, log_interval: float) -> None:
        self.throttled = _Throttled(log_interval)
        self.listening = (Listening(self.listener), *self.also)

    # ------------------------------------------------------------------ running

    def run(self, stop: threading.Event) -> None:
        """Serve until stop is set, then close every connection politely."""
        for listening in self.listening:
            listening.sock.setblocking(False)
            self.selector.register(listening.sock, selectors.EVENT_READ, listening)
        next_tick = time.monotonic() + self.tick_interval
        try:
            while not stop.is_set():
                now = time.monotonic()
                self._resume_accepting(now)
                timeout = max(0.0, min(next_tick, self._earliest_deadline(now + 0.2)) - now)
                for key, mask in self.selector.select(min(timeout, 0.2)):
                    if isinstance(key.data, Listening):
                        self._accept(key.data)
                    else:
                        peer = key.data
                        if mask & selectors.EVENT_READ:
                            self._read(peer)
                        if mask & selectors.EVENT_WRITE:
                            self._write(peer)
                self._process()
                now = time.monotonic()
                if now >= next_tick:
                    next_tick = now + self.tick_interval
                    self._guarded(self.handler.tick)
                    self._process()
                self._service(now)
        finally:
            self._shutdown()

    def _earliest_deadline(self, default: float) -> float:
        deadlines = [p.deadline for p in self.peers.values() if p.deadline]
        if self.accepting_again is not None:
            deadlines.append(self.accepting_again)
        return min([default, *deadlines])

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # one bad callback must not take the listener down
            log.exception("emulator: handler failed")

    # ------------------------------------------------------------------ sockets

    def _accept(self, listening: Listening) -> None:
        while True:
            try:
                sock, addr = listening.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._accept_failed(exc)
                return
            refusing = sum(1 for p in self.peers.values() if p.refusing)
            refuse = len(self.peers) - refusing >= self.max_connections
            if refuse:
                self.throttled.warning("cap", "emulator: %d connections open: refusing more", len(self.peers))
                if refusing >= _REFUSING_SLOTS:
                    sock.close()
                    continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if listening.tls is not None:
                # The handshake happens in the first reads (non-blocking); a client that never
                # finishes it is dropped at admit_timeout like one that never authenticates.
                try:
                    sock = listening.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError) as exc:  # the client already went away
                    log.debug("emulator: TLS connection from %s lost before its handshake: %s", addr, exc)
                    sock.close()
                    continue
            transport = Transport(Transport.SERVER)
            if self.configure is not None:
                self.configure(transport)
            connection = Connection()
            connection.collect(self.collector)
            transport.bind(connection)
            name, admit_by = f"{addr[0]}:{addr[1]}", time.monotonic() + self.admit_timeout
            wire = DeliveryIdRepair(max_frame_size=transport.max_frame_size or None, check_plain=self.check_plain)
            setattr(connection, MESSAGE_FORMAT, wire.message_format)  # what proton does not surface
            setattr(connection, PLAIN_AUTHORIZED, wire.plain_authorized)
            peer = _Peer(sock, transport, connection, name, admit_by, wire=wire, listening=listening, address=addr)
            if listening.http is not None and not refuse:
                peer.sniff = bytearray()
            if refuse:
                self._refuse(peer)
            self.peers[sock.fileno()] = peer
            self.selector.register(sock, selectors.EVENT_READ, peer)
            log.debug("emulator: connection from %s", peer.name)

    def _refuse(self, peer: _Peer) -> None:
        """Answer a connection over the cap with an AMQP open and close saying why (proton sends
        them once the client's header and SASL are through), and drop it soon after."""
        peer.refusing = True
        self.refused.add(peer.connection)
        peer.admit_by = time.monotonic() + _REFUSE_GRACE_S
        text = (
            f"The maximum number of concurrent connections ({self.max_connections}) has been reached: "
            "close a connection and retry."
        )
        peer.connection.container = "sbdlq-emulator"
        peer.connection.condition = Condition(RESOURCE_LIMIT, text)
        peer.connection.open()
        peer.connection.close()

    def _accept_failed(self, exc: OSError) -> None:
        """Out of file descriptors: stop selecting on the listener for a while (no busy loop)."""
        if exc.errno in _OUT_OF_FDS:
            self.throttled.warning("fds", "emulator: cannot accept connections: %s", os.strerror(exc.errno or 0))
        else:
            self.throttled.warning("accept", "emulator: accept failed: %s", exc)
        if self.accepting_again is None:
            for listening in self.listening:
                self.selector.unregister(listening.sock)
        self.accepting_again = time.monotonic() + self.backoff

    def _resume_accepting(self, now: float) -> None:
        if self.accepting_again is not None and now >= self.accepting_again:
            self.accepting_again = None
            for listening in self.listening:
                self.selector.register(listening.sock, selectors.EVENT_READ, listening)

    def _feed(self, peer: _Peer) -> None:
        """Push held inbound bytes into the transport, no more than it has room for.

        Pushing lets proton process what it took, which frees room: keep going while there is
        room, or a frame larger than proton's input buffer trickles in a buffer a loop turn.
        """
        capacity = peer.transport.capacity()
        while peer.inbuf and capacity > 0:
            taken = min(capacity, len(peer.inbuf))
            peer.transport.push(bytes(peer.inbuf[:taken]))
            del peer.inbuf[:taken]
            capacity = peer.transport.capacity()

    def _read(self, peer: _Peer) -> None:
        self._feed(peer)
        capacity = peer.transport.capacity()
        if capacity < 0 or peer.inbuf:
            return
        try:
            data = peer.sock.recv(min(max(capacity, 1), _RECV_CHUNK)) if capacity > 0 else None
            if data and isinstance(peer.sock, ssl.SSLSocket):
                data += _decrypted_rest(peer.sock)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return  # nothing yet (TLS: a handshake or a record still on its way)
        except OSError:
            data = b""
        if data is None:
            return
        if data:
            if _QUICKACK is not None:
                # Clients that keep Nagle on (the Python SDK does) hold their next small frame until
                # our ACK; Linux delays ACKs up to 200 ms, so acknowledge at once. Re-armed each read.
                try:
                    peer.sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
                except OSError:
                    pass
            if peer.sniff is not None:
                data = self._sniffed(peer, data)
                if not data:
                    return
            # The filter releases whole frames only, which may be more than this read.
            peer.inbuf += peer.wire.inbound(data)
            self._feed(peer)
        else:
            peer.transport.close_tail()

    def _sniffed(self, peer: _Peer, data: bytes) -> bytes:
        """The bytes to give proton once the first ones say AMQP; none while they are too few to
        tell, or when they were an HTTP request and the connection went to the HTTP side."""
        hand_to = peer.listening.http if peer.listening is not None else None
        assert peer.sniff is not None and hand_to is not None
        peer.sniff += data
        if len(peer.sniff) < SNIFF_BYTES:
            return b""
        first, peer.sniff = bytes(peer.sniff), None
        if not is_http(first):
            return first
        fd = peer.sock.fileno()
        self._drop(fd, peer, keep_socket=True)
        peer.sock.setblocking(True)
        self._guarded(lambda: hand_to(peer.sock, first, peer.address))
        return b""

    def _write(self, peer: _Peer) -> None:
        pending = peer.transport.pending()
        if pending > 0:  # through the wire filter, which may rewrite frames (frame_repair.py)
            chunk = peer.transport.peek(pending) or b""
            peer.transport.pop(len(chunk))
            peer.outbuf += peer.wire.outbound(chunk)
        if not peer.outbuf:
            return
        try:
            sent = peer.sock.send(peer.outbuf)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return  # TLS: retried with the same bytes first, as OpenSSL requires
        except OSError:
            peer.outbuf.clear()
            peer.transport.close_head()
            return
        del peer.outbuf[:sent]

    # ------------------------------------------------------------------ proton

    def _process(self) -> None:
        """Hand every queued proton event to the handler."""
        while True:
            event = self.collector.peek()
            if event is None:
                return
            try:
                if event.connection is None or event.connection not in self.refused:
                    self.handler.dispatch(event)
            except Exception:
                log.exception("emulator: error handling %s", event.type)
            finally:
                self.collector.pop()

    def _service(self, now: float) -> None:
        """Tick transports, push out what they produced, and drop finished connections."""
        for fd, peer in list(self.peers.items()):
            try:
                peer.deadline = peer.transport.tick(now) or 0.0
            except Exception:
                peer.deadline = 0.0
            self._feed(peer)
            self._write(peer)
            self._process()
            if (peer.transport.closed and not peer.outbuf) or self._stale(peer, now):
                self._drop(fd, peer)
                continue
            want = selectors.EVENT_READ if peer.transport.capacity() > 0 and not peer.inbuf else 0
            if peer.transport.pending() > 0 or peer.outbuf:
                want |= selectors.EVENT_WRITE
            self._watch(peer, want)

    def _watch(self, peer: _Peer, want: int) -> None:
        """Select on what the transport can take or give; park the socket when it is neither."""
        if want == peer.events:
            return
        if not want:
            self.selector.unregister(peer.sock)
        elif not peer.events:
            self.selector.register(peer.sock, want, peer)
        else:
            self.selector.modify(peer.sock, want, peer)
        peer.events = want

    def _stale(self, peer: _Peer, now: float) -> bool:
        """A connection the peer stopped talking to after close (two seconds), or never admitted."""
        if peer.transport.capacity() < 0 and peer.transport.pending() <= 0 and not peer.outbuf:
            return True
        if peer.admit_by and now > peer.admit_by:
            if not peer.refusing and (self.admitted is None or self.admitted(peer.connection)):
                peer.admit_by = 0.0  # admitted once is enough: grant expiry is the handler's job
            else:
                log.debug("emulator: %s did not authenticate in time: closed", peer.name)
                return True
        return peer.closing_since is not None and now - peer.closing_since > 2.0

    def _drop(self, fd: int, peer: _Peer, *, keep_socket: bool = False) -> None:
        """Forget a connection and close its socket (keep_socket: it was handed to the HTTP side)."""
        self.peers.pop(fd, None)
        try:
            if peer.events:
                self.selector.unregister(peer.sock)
        except (KeyError, ValueError):
            pass
        if not keep_socket:
            peer.sock.close()
        if peer.refusing:
            self.refused.discard(peer.connection)
        else:
            self._guarded(lambda: self.handler.connection_gone(peer.connection))
        try:
            peer.transport.unbind()
        except Exception:
            pass
        log.debug("emulator: connection from %s closed (%s)", peer.name, peer.transport.condition)

    def _shutdown(self) -> None:
        """Close connections with an AMQP close, give them a moment to flush, then drop them."""
        for listening in self.listening:
            try:
                self.selector.unregister(listening.sock)
            except (KeyError, ValueError):
                pass
        now = time.monotonic()
        for peer in self.peers.values():
            peer.closing_since = now
            try:
                peer.connection.close()
            except Exception:
                pass
        self._process()
        deadline = time.monotonic() + 1.0
        while self.peers and time.monotonic() < deadline:
            for fd, peer in list(self.peers.items()):
                self._write(peer)
                if peer.transport.pending() <= 0 and not peer.outbuf:
                    self._drop(fd, peer)
            if self.peers:
                time.sleep(0.01)
        for fd, peer in list(self.peers.items()):
            self._drop(fd, peer)
        self.selector.close()
