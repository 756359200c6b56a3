"""The emulator's HTTP side: `GET /health`, and the ATOM management API (Atom XML).

azure-servicebus's ServiceBusAdministrationClient reads runtime properties with
`GET /{queue}`, `GET /{topic}` and `GET /{topic}/Subscriptions/{sub}` and parses Atom
entries; it creates, updates and deletes entities and rules with PUT and DELETE on the
same paths (atom_write.py). With a key, every call but /health needs a SAS token. With
`serve --tls` the port speaks HTTPS only (each connection's handshake in its own request
thread, under the read timeout), and WebSocket upgrades on it are wss.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse
from xml.sax.saxutils import escape

from sbdlq.addresses import parse_entity
from sbdlq.connstr import is_loopback
from sbdlq.emulator.engine import Engine
from sbdlq.emulator.engine.errors import EntityExists, KindMismatch
from sbdlq.errors import BadInput, EntityNotFound, QuotaExceeded, SbdlqError, ServiceUnavailable

from . import atom, atom_write, sas, websocket
from .handoff import Prefixed
from .http_overflow import Overflow
from .limits import Limits

log = logging.getLogger(__name__)


def _count(query: dict[str, list[str]], name: str, default: int) -> int:
    """A non-negative integer query parameter ($skip, $top); BadInput (400) otherwise."""
    raw = query.get(name, [str(default)])[0]
    if not raw.isdigit() or len(raw) > 9:
        raise BadInput(f"{name} must be a non-negative integer, not {raw[:20]!r}")
    return int(raw)


class _TooLarge(Exception):
    """A request body over the limit, or without a length."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def handle_one_request(self) -> None:
        """One request, whose line and headers must all arrive within the read timeout: the socket's
        timeout counts per read, so a client trickling a byte every few seconds would hold a slot
        for ever (slowloris). Past the deadline the connection is shut down."""
        self._headers_in = threading.Event()
        timer = threading.Timer(self.server.read_timeout, self._cut_off_slow_headers)
        timer.daemon = True
        timer.start()
        try:
            super().handle_one_request()
        finally:
            self._headers_in.set()
            timer.cancel()

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self._headers_in.set()  # the body and the work are bounded otherwise
        return parsed

    def _cut_off_slow_headers(self) -> None:
        if not self._headers_in.is_set():
            log.debug("emulator http: headers not in after %.1fs: closing", self.server.read_timeout)
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("emulator http: " + format, *args)

    def _send(self, status: int, body: str, content_type: str) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, text: str) -> None:
        self._send(status, f"<Error><Code>{status}</Code><Detail>{escape(text)}</Detail></Error>", "application/xml")

    def _foreign(self) -> bool:
        """Whether a keyless listener must refuse this request (see _Server.foreign); answers 403 when so."""
        if not self.server.foreign(self.headers.get("Host"), self.headers.get("Origin")):
            return False
        self._error(403, "this keyless emulator answers requests for this machine only (serve --key to share it)")
        return True

    def do_GET(self) -> None:
        if self._foreign():
            return
        if websocket.is_upgrade(self.path, self.headers):  # AMQP over WebSockets (DESIGN §7)
            host, server = str(self.server.server_address[0]), self.server
            websocket.serve_upgrade(
                self, host=host, amqp_port=server.amqp_port, timeout=server.read_timeout, upgraded=server.free_slot
            )
            return
        url = urlparse(self.path)
        path = unquote(url.path).strip("/")
        if path == "health":
            self._send(200, self.server.health(), "application/json")
            return
        here = f"{self.server.scheme}://{self.headers.get('Host', '')}{self.path}"
        try:
            if "/rules/" in path.lower() and atom_write.target(path).rule is not None:
                body = self._read_rule(path)
                content_type = "application/atom+xml;type=entry;charset=utf-8"
            elif path.lower().endswith("/rules"):
                body = self._rules(path[: -len("/rules")], parse_qs(url.query), here)
                content_type = "application/atom+xml;type=feed;charset=utf-8"
            elif path.lower() in ("$resources/queues", "$resources/topics") or path.lower().endswith("/subscriptions"):
                body = self._list(path, parse_qs(url.query), here)
                content_type = "application/atom+xml;type=feed;charset=utf-8"
            else:
                body = atom.document(self._entry(path))
                content_type = "application/atom+xml;type=entry;charset=utf-8"
        except Exception as exc:
            self._fail(exc)
        else:
            self._send(200, body, content_type)

    def do_PUT(self) -> None:
        """Create an entity or rule, or with `If-Match` update one: 201 or 200 with its entry."""
        if self._foreign():
            return
        path = unquote(urlparse(self.path).path).strip("/")
        update = self.headers.get("If-Match") is not None
        try:
            target = atom_write.target(path)
            self._authorize(target.path)
            payload = self._body()
            with Engine(self.server.store_path, quotas=self.server.quotas) as engine:
                entry = atom_write.put(engine, path, payload, update=update, site=self._site())
        except Exception as exc:
            self._fail(exc)
        else:
            self._send(200 if update else 201, atom.document(entry), "application/atom+xml;type=entry;charset=utf-8")

    def do_DELETE(self) -> None:
        """Delete an entity (a topic with its subscriptions) or a rule: 200 with no body."""
        if self._foreign():
            return
        path = unquote(urlparse(self.path).path).strip("/")
        try:
            self._authorize(atom_write.target(path).path)
            with Engine(self.server.store_path, quotas=self.server.quotas) as engine:
                atom_write.delete(engine, path)
        except Exception as exc:
            self._fail(exc)
        else:
            self._send(200, "", "application/xml")

    def _fail(self, exc: Exception) -> None:
        """An error reply with the status the admin client maps to its exceptions (404, 409, 401, 403, 400)."""
        if isinstance(exc, EntityNotFound):
            self._error(404, exc.line())
        elif isinstance(exc, EntityExists | KindMismatch):
            self._error(409, exc.line())
        elif isinstance(exc, PermissionError):
            self._error(401, str(exc))
        elif isinstance(exc, _TooLarge):
            self._error(413, str(exc))
        elif isinstance(exc, QuotaExceeded):  # Service Bus: 403, "The maximum number of ... has been reached"
            self._error(403, exc.line())
        elif isinstance(exc, SbdlqError):
            self._error(400, exc.line())
        else:
            log.debug("emulator http: %s %s failed", self.command, self.path, exc_info=True)
            self._error(500, f"internal error: {type(exc).__name__}")

    def _body(self) -> bytes:
        """The request body, up to atom_write.MAX_BODY bytes."""
        raw = self.headers.get("Content-Length") or "0"
        length = int(raw) if raw.isdigit() else -1
        if not 0 <= length <= atom_write.MAX_BODY:
            raise _TooLarge(f"the request body must be 0 to {atom_write.MAX_BODY} bytes, with a Content-Length")
        return self.rfile.read(length)

    def _site(self) -> atom.Site:
        """Where this request reached us, and its api-version: what entry ids and links are made of."""
        version = parse_qs(urlparse(self.path).query).get("api-version", [""])[0]
        return atom.Site(f"{self.server.scheme}://{self.headers.get('Host', '')}", version)

    def _read_rule(self, path: str) -> str:
        self._authorize(atom_write.target(path).path)
        with Engine(self.server.store_path, quotas=self.server.quotas) as engine:
            return atom.document(atom_write.get_rule(engine, path, self._site()))

    def _entry(self, path: str) -> str:
        entity = parse_entity(path)
        self._authorize(str(entity))
        with Engine(self.server.store_path, quotas=self.server.quotas) as engine:
            info = engine.get_entity(entity)
            return atom.entry(info, None if info.kind == "topic" else engine.counts(entity), self._site())

    def _list(self, path: str, query: dict[str, list[str]], url: str) -> str:
        """A page of queues, topics or a topic's subscriptions, honouring $skip and $top."""
        self._authorize("")
        skip, top = _count(query, "$skip", 0), _count(query, "$top", 100)
        with Engine(self.server.store_path, quotas=self.server.quotas) as engine:
            return self._page(engine, path, skip, top, query, url)

    def _rules(self, subscription: str, query: dict[str, list[str]], url: str) -> str:
        """A page of a subscription's rules (read-only: the routing check of resubmit lists them)."""
        entity = parse_entity(subscription)
        if not entity.is_subscription:
            raise BadInput(f"{subscription!r} is not a subscription: only subscriptions have rules")
        self._authorize(str(entity))
        skip, top = _count(query, "$skip", 0), _count(query, "$top", 100)
        with Engine(self.server.store_path, quotas=self.server.quotas) as engine:
            rules = engine.rules(entity)
        page = rules[skip : skip + top]
        entries = [atom.rule_entry(r, str(entity), self._site(), feed_url=url) for r in page]
        next_url = None
        if skip + top < len(rules):
            base = url.split("?", 1)[0]
            next_url = f"{base}?$skip={skip + top}&$top={top}&api-version={query.get('api-version', [''])[0]}"
        return atom.document(atom.feed("Rules", url, entries, next_url))

    def _page(self, engine: Engine, path: str, skip: int, top: int, query: dict[str, list[str]], url: str) -> str:
        lowered = path.lower()
        if lowered.startswith("$resources/"):
            kind = lowered.split("/", 1)[1][:-1]  # queues -> queue, topics -> topic
            found = [e for e in engine.list_entities() if e.kind == kind]
            title = kind.capitalize() + "s"
        else:
            topic = path[: -len("/subscriptions")]
            engine.get_entity(topic)  # EntityNotFound for a missing topic
            found = [e for e in engine.list_entities() if e.kind == "subscription" and e.path.startswith(topic + "/")]
            title = "Subscriptions"
        page = found[skip : skip + top]
        site = self._site()
        entries = [
            atom.entry(e, None if e.kind == "topic" else engine.counts(e.path), site, feed_url=url) for e in page
        ]
        next_url = None
        if skip + top < len(found):
            base = url.split("?", 1)[0]
            next_url = f"{base}?$skip={skip + top}&$top={top}&api-version={query.get('api-version', [''])[0]}"
        return atom.document(atom.feed(title, url, entries, next_url))

    def _authorize(self, entity: str) -> None:
        key = self.server.key
        if key is None:
            return
        token = self.headers.get("Authorization") or ""
        try:
            grant = sas.verify(token, key)
        except sas.TokenRejected as exc:
            raise PermissionError(f"Unauthorized: {exc}")
        if not grant.covers(entity):
            raise PermissionError(f"Unauthorized: the token does not cover {entity}")


class _Server(ThreadingHTTPServer):
    """An HTTP server with a thread per request (each opens the store itself), bounded in number.

    A client that holds a connection open without sending costs one thread until the read
    timeout; past `max_clients` at once, new connections are closed at once.
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        store_path: str,
        key: str | None,
        amqp_port: int,
        limits: Limits,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.tls = tls
        self.scheme = "https" if tls is not None else "http"
        self.store_path = store_path
        self.key = key
        self.amqp_port = amqp_port
        self.slots = threading.BoundedSemaphore(limits.http_max_clients)
        self._slot = threading.local()  # whether this request thread still holds its slot
        self.read_timeout = limits.http_timeout_s
        self.quotas = limits.quotas
        super().__init__(address, _Handler)
        # Where a connection goes when every slot is taken: /health still answers there.
        self.overflow = Overflow(self._overflow_health)

    def health(self) -> str:
        """The /health reply's JSON."""
        payload: dict[str, Any] = {"status": "ok", "amqp_port": self.amqp_port}
        if self.key is None:  # a keyed listener may face others: keep its file system private
            payload["store"] = self.store_path
        return json.dumps(payload)

    def foreign(self, host: str | None, origin: str | None) -> bool:
        """Whether a keyless listener must refuse a request: its Host, or a browser's Origin, names
        another machine (a page of another site, DNS-rebound to this port, would otherwise read or
        delete queues). A keyed listener checks each request's token instead."""
        if self.key is not None:
            return False
        names = [urlparse(f"//{host or ''}").hostname]
        if origin is not None:
            names.append(urlparse(origin).hostname if origin != "null" else "null")
        bound = str(self.server_address[0])
        return not all(name is not None and (is_loopback(name) or name == bound) for name in names)

    def _overflow_health(self, headers: dict[str, str]) -> bytes | None:
        return None if self.foreign(headers.get("host"), headers.get("origin")) else self.health().encode()

    def server_close(self) -> None:
        self.overflow.stop()
        super().server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.debug("emulator http: too many clients: %s waits for a health check only", client_address)
            self.overflow.take(request)
            return
        request.settimeout(self.read_timeout)
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        self._slot.held = True
        try:
            if self.tls is not None:
                # In the request's thread, bounded by its read timeout: a client that stalls the
                # handshake holds one slot, never the accept loop.
                try:
                    request = self.tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError) as exc:
                    log.debug("emulator https: handshake with %s failed: %s", client_address, exc)
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            self.free_slot()

    def adopt(self, request: socket.socket, first: bytes, client_address: Any) -> None:
        """Serve a TLS connection the AMQPS listener took whose first bytes (given) are an HTTP
        request: in a thread of its own and a slot, as any request here (handoff.py)."""
        if not self.slots.acquire(blocking=False):
            log.debug("emulator https: too many clients: %s on the AMQPS port closed", client_address)
            self.shutdown_request(request)
            return
        request.settimeout(self.read_timeout)
        thread = threading.Thread(
            target=self._adopted, args=(Prefixed(request, first), client_address), name="sbdlq-emulator-https"
        )
        thread.daemon = True
        thread.start()

    def _adopted(self, request: Any, client_address: Any) -> None:
        self._slot.held = True
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self.free_slot()

    def free_slot(self) -> None:
        """Give back this thread's slot: at the end of a request, or once it became a WebSocket
        relay (bounded from then on by the AMQP listener's connection cap, not the HTTP slots)."""
        if getattr(self._slot, "held", False):
            self._slot.held = False
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("emulator http: request from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpEndpoint:
    """Run the HTTP side in a background thread."""

    def __init__(
        self,
        store_path: str,
        *,
        host: str,
        port: int,
        key: str | None,
        amqp_port: int,
        limits: Limits | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        kind = _Server6 if ":" in host else _Server
        try:
            self._server = kind((host.strip("[]"), port), store_path, key, amqp_port, limits or Limits(), tls)
        except OSError as exc:
            raise ServiceUnavailable(
                f"cannot serve HTTP on {host}:{port}: {os.strerror(exc.errno) if exc.errno else exc}",
                hint="choose another --http-port, or turn the HTTP side off",
            ) from exc
        self._thread = threading.Thread(target=self._run, name="sbdlq-emulator-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def _run(self) -> None:
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            self._server.server_close()

    def start(self) -> None:
        self._thread.start()

    def adopt(self, request: socket.socket, first: bytes, client_address: Any) -> None:
        """Serve an HTTPS connection the AMQPS port took (see _Server.adopt)."""
        self._server.adopt(request, first, client_address)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)
