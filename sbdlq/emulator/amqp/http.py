"""The emulator's HTTP side: `GET /health`, and the admin client's entity reads (Atom XML).

azure-servicebus's ServiceBusAdministrationClient reads runtime properties with
`GET /{queue}`, `GET /{topic}` and `GET /{topic}/Subscriptions/{sub}` and parses Atom
entries; answering those lets `get_*_runtime_properties` work against the emulator.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import unquote, urlparse
from xml.sax.saxutils import escape

from sbdlq.emulator.engine import Engine
from sbdlq.errors import EntityNotFound, SbdlqError, ServiceUnavailable
from sbdlq.models import Counts, EntityInfo
from sbdlq.paths import parse_entity

from . import sas

log = logging.getLogger(__name__)

_ATOM = "http://www.w3.org/2005/Atom"
_SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
_COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"


def _duration(seconds: float) -> str:
    """ISO 8601 duration as .NET writes TimeSpan (`P10675199DT2H48M5S`, `PT1M`)."""
    days, rest = divmod(max(seconds, 0.0), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = "".join(f"{v:g}{u}" for v, u in ((int(hours), "H"), (int(minutes), "M"), (round(secs, 3), "S")) if v)
    text = "P" + (f"{int(days)}D" if days else "") + (f"T{clock}" if clock else "")
    return text if text != "P" else "PT0S"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _count_details(counts: Counts | None) -> str:
    c = counts or Counts(entity="")
    fields = {
        "ActiveMessageCount": c.active,
        "DeadLetterMessageCount": c.dead_letter,
        "ScheduledMessageCount": c.scheduled,
        "TransferDeadLetterMessageCount": c.transfer_dead_letter,
        "TransferMessageCount": 0,
    }
    inner = "".join(f"<d2p1:{k}>{v}</d2p1:{k}>" for k, v in fields.items())
    return f'<CountDetails xmlns:d2p1="{_COUNTS}">{inner}</CountDetails>'


def entity_xml(info: EntityInfo, counts: Counts | None, url: str) -> str:
    """One Atom entry describing a queue, topic or subscription as the admin client expects."""
    kind = {"queue": "QueueDescription", "topic": "TopicDescription"}.get(info.kind, "SubscriptionDescription")
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    total = 0 if counts is None else counts.active + counts.dead_letter + counts.transfer_dead_letter + counts.scheduled
    fields: list[tuple[str, Any]] = [("DefaultMessageTimeToLive", _duration(info.default_ttl_s))]
    if info.kind != "topic":
        fields += [
            ("LockDuration", _duration(info.lock_duration_s)),
            ("RequiresSession", _bool(info.requires_session)),
            ("DeadLetteringOnMessageExpiration", _bool(info.dead_lettering_on_expiration)),
            ("MaxDeliveryCount", info.max_delivery_count),
            ("MessageCount", total),
        ]
    if info.kind != "subscription":
        fields.append(("RequiresDuplicateDetection", _bool(info.requires_duplicate_detection)))
    if info.kind == "topic":
        fields.append(("SubscriptionCount", info.subscription_count))
    fields += [("Status", info.status), ("CreatedAt", now), ("UpdatedAt", now), ("AccessedAt", now)]
    if info.forward_to:
        fields.append(("ForwardTo", info.forward_to))
    if info.forward_dead_lettered_to:
        fields.append(("ForwardDeadLetteredMessagesTo", info.forward_dead_lettered_to))
    body = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in fields) + _count_details(counts)
    title = escape(info.path.rsplit("/", 1)[-1] if info.kind == "subscription" else info.path)
    return (
        f'<?xml version="1.0" encoding="utf-8"?><entry xmlns="{_ATOM}">'
        f'<id>{escape(url)}</id><title type="text">{title}</title>'
        f"<published>{now}</published><updated>{now}</updated>"
        f'<content type="application/xml"><{kind} xmlns="{_SB}" '
        f'xmlns:i="http://www.w3.org/2001/XMLSchema-instance">{body}</{kind}></content></entry>'
    )


class _Handler(BaseHTTPRequestHandler):
    server: _Server

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

    def do_GET(self) -> None:
        url = urlparse(self.path)
        path = unquote(url.path).strip("/")
        if path == "health":
            payload = {"status": "ok", "amqp_port": self.server.amqp_port, "store": self.server.store_path}
            self._send(200, json.dumps(payload), "application/json")
            return
        try:
            entity = parse_entity(path)
            self._authorize(str(entity))
            engine = self.server.engine()
            info = engine.get_entity(entity)
            counts = None if info.kind == "topic" else engine.counts(entity)
        except EntityNotFound as exc:
            self._error(404, exc.line())
            return
        except PermissionError as exc:
            self._error(401, str(exc))
            return
        except SbdlqError as exc:
            self._error(400, exc.line())
            return
        self._send(
            200,
            entity_xml(info, counts, f"http://{self.headers.get('Host', '')}{self.path}"),
            "application/atom+xml;type=entry;charset=utf-8",
        )

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


class _Server(HTTPServer):
    """An HTTP server with one engine, opened in (and used only from) its serving thread."""

    def __init__(self, address: tuple[str, int], store_path: str, key: str | None, amqp_port: int) -> None:
        self.store_path = store_path
        self.key = key
        self.amqp_port = amqp_port
        self._engine: Engine | None = None
        super().__init__(address, _Handler)

    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(self.store_path)
        return self._engine

    def server_close(self) -> None:
        super().server_close()
        if self._engine is not None:
            self._engine.close()
            self._engine = None


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpEndpoint:
    """Run the HTTP side in a background thread."""

    def __init__(self, store_path: str, *, host: str, port: int, key: str | None, amqp_port: int) -> None:
        kind = _Server6 if ":" in host else _Server
        try:
            self._server = kind((host.strip("[]"), port), store_path, key, amqp_port)
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

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)
