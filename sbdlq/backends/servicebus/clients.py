"""How the SDK clients are built: namespace names, the connection string, retry policies, admin transport.

Pure settings; the azure packages are imported inside the functions that need them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sbdlq.connstr import ConnectionInfo
from sbdlq.errors import AdminPortUnknown, BadInput
from sbdlq.transport import Proxy, Transport

#: the Service Bus emulator serves its management (HTTP, no TLS) API on this port (`serve --tls`: HTTPS)
ADMIN_EMULATOR_PORT = 5300
#: AMQP's port when a connection string names none
AMQP_PORT = 5672
_NAMESPACE_HOST = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"
)


@dataclass(frozen=True, slots=True)
class AdminPort:
    """Where an emulator's admin endpoint answers: its port, where that came from (for
    --verbose), and for `serve --tls` https with the CA file to trust (None: the system's)."""

    port: int = ADMIN_EMULATOR_PORT
    source: str = ""
    https: bool = False
    ca: str | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.https else "http"


def emulator_admin_port(info: ConnectionInfo, given: int | None) -> AdminPort:
    """The emulator's admin (HTTP) port and where it came from.

    The port must belong to the AMQP endpoint the string names, or counts and entity
    properties would come from another store: given (SBDLQ_EMULATOR_HTTP_PORT) wins; else the
    file a running `sbdlq emulator serve` on that AMQP port left (which also says whether it
    speaks HTTPS, `--tls`, and the CA then trusted for it); else, for AMQP's own port 5672,
    Microsoft's emulator pair 5300 (unless a recorded server on another AMQP port holds 5300).
    Any other endpoint without a record is refused: AdminPortUnknown (exit 2).
    """
    from sbdlq.emulator import discovery

    amqp_port = info.port or AMQP_PORT
    found = discovery.find(info.host, amqp_port)
    if given:
        if found is None:
            return AdminPort(given, "given (SBDLQ_EMULATOR_HTTP_PORT)")
        # HTTPS only if it names the recorded server's port
        ca = str(found.ca) if found.ca is not None else None
        return AdminPort(given, "given (SBDLQ_EMULATOR_HTTP_PORT)", found.https and given == found.http_port, ca)
    if found is not None:
        ca = str(found.ca) if found.ca is not None else None
        return AdminPort(found.http_port, f"`sbdlq emulator serve` (pid {found.pid}) in {found.path}", found.https, ca)
    endpoint = f"{info.host}:{amqp_port}"
    hint = (
        f"is `sbdlq emulator serve` running on {endpoint}? For another emulator, "
        "set SBDLQ_EMULATOR_HTTP_PORT to its HTTP port"
    )
    if amqp_port != AMQP_PORT:
        raise AdminPortUnknown(f"no emulator recorded its HTTP (admin) port for {endpoint}", hint=hint)
    other = discovery.owner_of_http_port(ADMIN_EMULATOR_PORT)
    if other is not None:
        raise AdminPortUnknown(
            f"no emulator recorded its HTTP (admin) port for {endpoint}, and port {ADMIN_EMULATOR_PORT} "
            f"belongs to the one on AMQP port {other.amqp_port} (pid {other.pid})",
            hint=hint,
        )
    return AdminPort(source="the default (Microsoft's emulator pairs it with AMQP port 5672)")


def normalize_namespace(text: str) -> str:
    """`contoso`, `contoso.servicebus.windows.net` or `sb://contoso.../` → the host name."""
    raw = text.strip()
    if "://" in raw:
        raw = urlsplit(raw).hostname or ""
    raw = raw.strip("/").split("/")[0]
    if raw and "." not in raw:
        raw += ".servicebus.windows.net"
    if not raw or not _NAMESPACE_HOST.match(raw):
        raise BadInput(f"invalid namespace {text!r}", hint="use NAME.servicebus.windows.net (or just NAME)")
    return raw.lower()


def sdk_connection_string(info: ConnectionInfo) -> str:
    """A connection string the SDK parses the way we did (it wants `UseDevelopmentEmulator=true` lowercase)."""
    parts = [f"Endpoint={info.endpoint}"]
    if info.key:
        parts += [f"SharedAccessKeyName={info.key_name}", f"SharedAccessKey={info.key}"]
    else:
        parts.append(f"SharedAccessSignature={info.sas}")
    if info.entity_path:
        parts.append(f"EntityPath={info.entity_path}")
    if info.use_emulator:
        parts.append("UseDevelopmentEmulator=true")
    return ";".join(parts)


# Concurrent operations on one link take turns reading frames, each waiting up to this long
# after its reply was already read by another (0.2 s by default): overlapped settlements would
# pay it every time. Handlers take it per sender/receiver, not from the client.
SOCKET_TIMEOUT_S = 0.01


def amqp_client_kwargs(timeout_s: float, *, sending: bool = False) -> dict[str, Any]:
    """SDK retry settings under which an unreachable broker answers within timeout_s.

    Three attempts of a quarter of the budget each, plus exponential back-off of at most
    0.15 of it, leave headroom under the `asyncio.wait_for` guard around every call.

    `sending`: the senders' client, which never retries. A send whose answer was lost (a cut
    connection, a timeout) may have reached the broker; the SDK's retry would send the copies
    again. sbdlq owns every send retry instead: it retries opening a sender (nothing is sent),
    and a send whose outcome is unknown is never repeated (backend.py, DESIGN §4). Its one
    attempt may use most of the budget.
    """
    factor = min(0.8, timeout_s / 20)
    return {
        "retry_total": 0 if sending else 2,
        "retry_backoff_factor": factor,
        "retry_backoff_max": max(2 * factor, 0.01),
        "retry_mode": "exponential",
        "try_timeout": max(timeout_s * (0.9 if sending else 0.25), 0.05),
    }


def amqp_transport_kwargs(transport: Transport | None, *, emulator: bool, host: str, admin_port: int) -> dict[str, Any]:
    """The AMQP client's transport_type, http_proxy and (emulator only) custom_endpoint_address."""
    if transport is None or not transport.websockets:
        return {}
    require_websocket_client()
    from azure.servicebus import TransportType

    kwargs: dict[str, Any] = {"transport_type": TransportType.AmqpOverWebsocket}
    if emulator:
        # The SDK dials port 443 for WebSockets whatever the endpoint says (UseDevelopmentEmulator
        # only drops TLS); `emulator serve` answers on its HTTP port, named through the SDK's
        # public custom endpoint.
        bare = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        kwargs["custom_endpoint_address"] = f"sb://{bare}:{admin_port}"
    proxy = transport.proxy
    if proxy is not None:
        kwargs["http_proxy"] = {
            # The aio SDK hands aiohttp f"{proxy_hostname}:{proxy_port}" as the proxy URL, which
            # aiohttp refuses without a scheme (azure-servicebus 7.15).
            "proxy_hostname": f"http://{proxy.host}",
            "proxy_port": proxy.port,
            "username": proxy.username,
            "password": proxy.password,
        }
    return kwargs


def require_websocket_client() -> None:
    """BadInput (exit 2) naming the extra when aiohttp, the aio SDK's WebSocket client, is missing."""
    import importlib.util

    if importlib.util.find_spec("aiohttp") is None:
        raise BadInput(
            "--transport websockets needs the aiohttp package",
            hint="install it with: pip install 'sbdlq[websockets]'",
        )


def admin_client_kwargs(
    timeout_s: float,
    *,
    emulator: bool,
    port: int = ADMIN_EMULATOR_PORT,
    proxy: Proxy | None = None,
    tls: AdminPort | None = None,
) -> dict[str, Any]:
    """Retry policy, transport and proxy for the (sync) admin client."""
    factor = min(0.8, timeout_s / 20)
    extra: dict[str, Any] = {}
    if proxy is not None:  # azure-core's ProxyPolicy; without it requests still honours HTTPS_PROXY
        extra["proxies"] = {"http": proxy.url, "https": proxy.url}
    return {
        **extra,
        # A local emulator without its management port refuses at once: retrying only delays
        # the fallback to peek.
        "retry_total": 0 if emulator else 2,
        "retry_backoff_factor": factor,
        "retry_backoff_max": max(2 * factor, 0.01),
        "timeout": timeout_s,
        "transport": admin_transport(timeout_s, emulator=emulator, port=port, tls=tls),
    }


def admin_transport(
    timeout_s: float, *, emulator: bool, port: int = ADMIN_EMULATOR_PORT, tls: AdminPort | None = None
) -> Any:
    """The admin HTTP transport: https as usual, or http on the emulator's port (5300); https
    there with the emulator's CA when it serves with --tls."""
    from azure.core.pipeline.transport import RequestsTransport

    options: dict[str, Any] = {
        "connection_timeout": max(timeout_s / 4, 0.05),
        "read_timeout": max(timeout_s / 2, 0.05),
    }
    if not emulator:
        return RequestsTransport(**options)
    scheme = "http"
    if tls is not None and tls.https:
        scheme = "https"
        if tls.ca is not None:  # this server's CA, for this transport only
            options["connection_verify"] = tls.ca
    return plain_http_transport_class()(port=port, scheme=scheme, **options)


def admin_http_url(url: str, port: int = ADMIN_EMULATOR_PORT, scheme: str = "http") -> str:
    """The SDK's `https://host:amqp-port/...` admin URL as the emulator serves it: `http://host:5300/...`
    (`https` for `serve --tls`)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit((scheme, f"{host}:{port}", parts.path, parts.query, parts.fragment))


@functools.cache
def plain_http_transport_class() -> type:
    """A RequestsTransport that rewrites every URL to http on the emulator's management port."""
    from azure.core.pipeline.transport import RequestsTransport

    class PlainHttpAdminTransport(RequestsTransport):  # type: ignore[misc]
        """Admin transport for the emulator: its management API has no TLS, on its own port."""

        def __init__(self, *, port: int, scheme: str = "http", **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.admin_port = port
            self.scheme = scheme

        def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            """Rewrite the scheme and port, then send."""
            # The admin client always builds https://<endpoint host:AMQP port>; there is no
            # option for the scheme, so the transport is the one place to change it.
            request.url = admin_http_url(request.url, self.admin_port, self.scheme)
            return super().send(request, **kwargs)

    return PlainHttpAdminTransport
