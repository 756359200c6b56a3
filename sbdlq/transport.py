"""How sbdlq reaches a namespace: AMQP on 5671 or AMQP over WebSockets on 443, and an HTTP proxy.

`--transport amqp|websockets` (`SBDLQ_TRANSPORT`, profile key `transport`) and `--proxy URL`
(`HTTPS_PROXY`, profile key `proxy`). A proxy's user:password is a secret: it is registered
with `redact` the moment it is parsed, so no error, log line or `config show` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from sbdlq.errors import BadInput

TRANSPORTS = ("amqp", "websockets")


@dataclass(frozen=True, repr=False)
class Proxy:
    """An HTTP proxy (CONNECT for wss://, absolute-form for plain http and ws://)."""

    url: str
    host: str
    port: int
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        return f"Proxy({self.shown})"

    @property
    def shown(self) -> str:
        """The URL as it may be printed: user:password masked."""
        return f"http://***@{self.host}:{self.port}" if self.username or self.password else self.url


@dataclass(frozen=True)
class Transport:
    """The transport kind and proxy for a Service Bus target (the local emulator store ignores both)."""

    transport: str = "amqp"
    proxy: Proxy | None = None

    @property
    def websockets(self) -> bool:
        return self.transport == "websockets"

    def describe(self, amqp_port: int | None = None) -> str:
        """For --verbose: never the proxy's credentials. `amqp_port`: the endpoint's own port
        (an emulator's), where it is not the transport's usual one."""
        text = "AMQP over WebSockets (443)" if self.websockets else f"AMQP ({amqp_port or 5671})"
        if self.proxy is not None:
            text += f", proxy {self.proxy.shown}" + ("" if self.websockets else " for the admin client only")
        return text


def check_transport(value: str, where: str = "--transport") -> str:
    """`amqp` or `websockets` (case-insensitive); BadInput naming where the value came from."""
    lowered = str(value).strip().lower()
    if lowered not in TRANSPORTS:
        raise BadInput(f"{where} must be amqp or websockets, not {value!r}")
    return lowered


def parse_proxy(text: str, where: str = "--proxy") -> Proxy:
    """`http://[user:password@]host:port` (a bare `host:port` means http); BadInput otherwise."""
    raw = str(text).strip()
    try:
        parts = urlsplit(raw if "://" in raw else f"http://{raw}")
    except ValueError:  # an unclosed IPv6 bracket, say
        raise BadInput(f"{where}: invalid proxy URL {_masked(raw)!r}", hint="use http://[user:password@]host:port")
    if parts.password:
        remember_secret(unquote(parts.password))
    try:
        port = parts.port
    except ValueError:
        port = -1
    shown = _masked(raw)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or port == -1:
        raise BadInput(f"{where}: invalid proxy URL {shown!r}", hint="use http://[user:password@]host:port")
    if parts.path not in ("", "/") or parts.query:
        raise BadInput(f"{where}: a proxy URL has no path: {shown!r}", hint="use http://[user:password@]host:port")
    host = parts.hostname
    url_host = f"[{host}]" if ":" in host else host
    port = port or (443 if parts.scheme.lower() == "https" else 80)
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return Proxy(f"{parts.scheme.lower()}://{parts.netloc}", url_host, port, user, password)


def remember_secret(secret: str) -> None:
    """Mask secret wherever it turns up later (a repr, an SDK error)."""
    from sbdlq.connstr import remember_secret as _remember

    _remember(secret)


def _masked(raw: str) -> str:
    from sbdlq.connstr import redact

    return redact(raw)
