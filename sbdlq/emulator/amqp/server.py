"""`sbdlq emulator serve`: the AMQP 1.0 listener (and its HTTP side) over one emulator store."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial

from proton import Transport

from sbdlq.connstr import is_loopback
from sbdlq.emulator.engine import Engine
from sbdlq.emulator.signals import stop_on_signals
from sbdlq.emulator.tls import TlsFiles, server_context
from sbdlq.errors import BadInput, ServiceUnavailable

from . import sasl
from .broker import Broker
from .driver import Driver, Listening
from .guard import Guard
from .limits import Limits

log = logging.getLogger(__name__)


def listen(host: str, port: int, *, option: str = "--port") -> socket.socket:
    """A listening socket on host:port (port 0 picks a free one); ServiceUnavailable when taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family, backlog=128)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ServiceUnavailable(f"cannot listen on {host}:{port}: {reason}", hint=f"choose another {option}") from exc


def _configure(transport: Transport, *, max_frame_size: int) -> None:
    # Service Bus SDKs authenticate with a CBS token after an ANONYMOUS SASL exchange
    # (or MSSBCBS, which the wire filter hands proton as ANONYMOUS: sasl.py).
    transport.sasl().allowed_mechs("ANONYMOUS")
    # Frames above this are a framing error: no single frame can make proton buffer more.
    transport.max_frame_size = max_frame_size


def _default_clock() -> Callable[[], float]:
    """The wall clock, shifted by SBDLQ_EMULATOR_CLOCK_SKEW (tests let tokens expire without sleeping)."""
    from sbdlq.emulator.clock import emulator_clock

    return emulator_clock() or time.time


def _driver(
    listener: socket.socket,
    also: tuple[Listening, ...],
    engine: Engine,
    key: str | None,
    clock: Callable[[], float],
    limits: Limits,
) -> Driver:
    """The socket loop, with the broker behind the guard, for the listeners."""
    broker = Broker(engine, key=key, clock=clock)
    guard = Guard(
        broker,
        request_max_bytes=limits.request_max_bytes,
        clock=clock,
        discard_max_bytes=limits.discard_max_bytes,
    )
    return Driver(
        listener,
        guard,
        also=also,
        configure=partial(_configure, max_frame_size=limits.max_frame_size),
        admitted=guard.admitted,
        admit_timeout=limits.auth_timeout_s,
        max_connections=limits.max_connections,
        check_plain=sasl.plain_checker(key),
        backoff=limits.emfile_backoff_s,
        log_interval=limits.log_interval_s,
    )


def serve(
    store_path: str,
    *,
    host: str = "127.0.0.1",
    port: int = 5672,
    key: str | None = None,
    http_port: int | None = 5300,
    ready: Callable[[int, int | None], None] | None = None,
    stop_event: threading.Event | None = None,
    limits: Limits | None = None,
    clock: Callable[[], float] | None = None,
    tls: TlsFiles | None = None,
    tls_port: int = 5671,
    tls_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve the store over AMQP (and HTTP) until stop_event is set; blocks.

    ready(amqp_port, http_port) is called once both ports listen. Without a stop_event the
    function installs its own SIGINT/SIGTERM handlers. Unsettled messages keep their locks
    until they expire, as with any broker: nothing is lost on shutdown. `limits` bounds what
    clients may cost; `clock` judges token expiry (default: the wall clock, with the skew).
    With `tls`, AMQPS listens on tls_port too (tls_ready(port) is called before ready) and
    the HTTP side speaks HTTPS (and wss).
    """
    if not key and not is_loopback(host):
        raise BadInput(
            f"refusing to serve {host} without a key",
            hint="pass --key so clients must present a SAS token, or bind 127.0.0.1",
        )
    stop = stop_event or threading.Event()
    limits = limits or Limits()
    clock = clock or _default_clock()
    from .http import HttpEndpoint  # the HTTP side only when asked for

    context: ssl.SSLContext | None = server_context(tls) if tls is not None else None
    engine = Engine(store_path, quotas=limits.quotas)
    listener: socket.socket | None = None
    secure: socket.socket | None = None
    web: HttpEndpoint | None = None
    try:
        listener = listen(host, port)
        amqp_port = int(listener.getsockname()[1])
        if context is not None:
            secure = listen(host, tls_port, option="--tls-port")
        if http_port is not None:
            web = HttpEndpoint(
                store_path, host=host, port=http_port, key=key, amqp_port=amqp_port, limits=limits, tls=context
            )
            web.start()
        log.info("emulator: AMQP on %s:%d%s", host, amqp_port, f", HTTP on {web.port}" if web else "")
        if secure is not None and tls_ready is not None:
            tls_ready(int(secure.getsockname()[1]))
        if ready is not None:  # last: a caller may connect as soon as it is called
            ready(amqp_port, web.port if web else None)
        # The caller that passes its own stop_event handles signals itself.
        with stop_on_signals(stop) if stop_event is None else nullcontext():
            # The AMQPS port answers HTTPS too (handoff.py): one endpoint port for every stack.
            also = (Listening(secure, context, web.adopt if web else None),) if secure is not None else ()
            _driver(listener, also, engine, key, clock, limits).run(stop)
    finally:
        if web is not None:
            web.stop()
        for sock in filter(None, (listener, secure)):
            sock.close()
        engine.close()
