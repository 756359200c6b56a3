"""Service Bus connection strings: parsing, and redaction of secrets in any text.

No azure imports here: this module is on start-up paths (`sbdlq --help`, error output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from sbdlq.errors import BadInput

EMULATOR_AMQP_PORT = 5672
_SCHEMES = ("sb", "amqps", "amqp", "https")
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$")
_MASK = "***"
# Secrets seen by parse_connection_string: masked verbatim wherever they turn up later, so a
# key leaked in a form no pattern below knows (a tuple repr, a URL-encoded copy) is still hidden.
_KNOWN_SECRETS: set[str] = set()
_MIN_KNOWN_SECRET = 8


@dataclass(frozen=True, repr=False)
class ConnectionInfo:
    """The parts of a connection string sbdlq uses; repr never shows the key or SAS."""

    endpoint: str
    host: str
    port: int | None
    key_name: str | None
    key: str | None
    sas: str | None
    entity_path: str | None
    use_emulator: bool

    @property
    def address(self) -> str:
        """`host` or `host:port`: what error messages name."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.port is not None else host

    def __repr__(self) -> str:
        return (
            f"ConnectionInfo(endpoint={self.endpoint!r}, host={self.host!r}, port={self.port!r}, "
            f"key_name={self.key_name!r}, key={_MASK if self.key else None!r}, "
            f"sas={_MASK if self.sas else None!r}, entity_path={self.entity_path!r}, "
            f"use_emulator={self.use_emulator!r})"
        )

    __str__ = __repr__


def parse_connection_string(text: str) -> ConnectionInfo:
    """Parse `Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...`; BadInput when malformed."""
    raw = (text or "").strip()
    if not raw:
        raise BadInput("the connection string is empty")
    parts = [p.strip() for p in raw.split(";")]
    parts = [p for p in parts if p]
    settings: dict[str, str] = {}
    for index, part in enumerate(parts, start=1):
        if "=" not in part:
            # Never echo the part: a mangled string may put the key there.
            raise BadInput(
                f"malformed connection string: part {index} of {len(parts)} is not KEY=VALUE",
                hint="expected Endpoint=sb://NAMESPACE.servicebus.windows.net/;"
                "SharedAccessKeyName=NAME;SharedAccessKey=KEY",
            )
        name, value = part.split("=", 1)
        settings[name.strip().lower()] = value.strip()

    key = settings.get("sharedaccesskey") or None
    sas = settings.get("sharedaccesssignature") or None
    for secret in (key, sas):
        if secret and len(secret) >= _MIN_KNOWN_SECRET:
            _KNOWN_SECRETS.add(secret)

    endpoint_text = settings.get("endpoint")
    if not endpoint_text:
        raise BadInput(
            "the connection string has no Endpoint",
            hint="add Endpoint=sb://NAMESPACE.servicebus.windows.net/",
        )
    use_emulator = _parse_bool(settings.get("usedevelopmentemulator"))
    host, port = _parse_endpoint(endpoint_text)
    if use_emulator and port is None:
        port = EMULATOR_AMQP_PORT

    key_name = settings.get("sharedaccesskeyname") or None
    if key and sas:
        raise BadInput("the connection string has both SharedAccessKey and SharedAccessSignature; keep one")
    if not key and not sas:
        raise BadInput(
            "the connection string has no SharedAccessKey (or SharedAccessSignature)",
            hint="copy the whole string from the portal: Shared access policies",
        )
    if key and not key_name:
        raise BadInput("the connection string has a SharedAccessKey but no SharedAccessKeyName")

    shown_host = f"[{host}]" if ":" in host else host
    endpoint = f"sb://{shown_host}:{port}/" if port is not None else f"sb://{shown_host}/"
    return ConnectionInfo(
        endpoint=endpoint,
        host=host,
        port=port,
        key_name=key_name,
        key=key,
        sas=sas,
        entity_path=settings.get("entitypath") or None,
        use_emulator=use_emulator,
    )


def _parse_bool(value: str | None) -> bool:
    if value is None or value == "":
        return False
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise BadInput("UseDevelopmentEmulator must be true or false")


def _parse_endpoint(text: str) -> tuple[str, int | None]:
    """Host and optional port of an Endpoint value."""
    hint = "expected Endpoint=sb://NAMESPACE.servicebus.windows.net/"
    if "://" not in text:
        raise BadInput("the connection string's Endpoint has no scheme", hint=hint)
    parsed = urlsplit(text)
    scheme = parsed.scheme.lower()
    if scheme not in _SCHEMES:
        raise BadInput(f"the connection string's Endpoint has scheme {scheme!r}, not sb://", hint=hint)
    host = parsed.hostname or ""
    if not host or not (_HOST.match(host) or _is_ipv6(host)):
        raise BadInput("the connection string's Endpoint has no valid host name", hint=hint)
    try:
        port = parsed.port
    except ValueError:
        raise BadInput("the connection string's Endpoint has an invalid port", hint=hint)
    return host, port


def _is_ipv6(host: str) -> bool:
    return ":" in host and re.fullmatch(r"[0-9A-Fa-f:.]+", host) is not None


# Values that stop at `;`, whitespace, quotes, `&` or a closing bracket: keys, `sig=` parts.
_TIGHT = r"[^;\s'\"&,})\]]+"
# Values that may hold spaces (`SharedAccessSignature sr=...`, `Bearer eyJ...`): up to `;`,
# a quote, a comma, a bracket or the end of the line.
_LOOSE = r"[^;'\"\n\r,})\]]+"
_PATTERNS = [
    # SharedAccessKey=..., 'SharedAccessKey': '...', "SharedAccessKey": "..." (not ...KeyName)
    re.compile(r"(?P<k>\bSharedAccessKey\b['\"]?\s*[:=]\s*['\"]?)(?P<v>" + _TIGHT + ")", re.IGNORECASE),
    re.compile(r"(?P<k>\bSharedAccessSignature\b['\"]?\s*[:=]\s*['\"]?)(?P<v>" + _LOOSE + ")", re.IGNORECASE),
    # Authorization: <anything> as a header line, a dict entry or a keyword argument.
    re.compile(r"(?P<k>\bAuthorization\b['\"]?\s*[:=]\s*['\"]?)(?P<v>" + _LOOSE + ")", re.IGNORECASE),
    # The signature inside any SAS token, also URL-encoded (sig%3D).
    re.compile(r"(?P<k>(?<![A-Za-z0-9_])sig(?:=|%3D))(?P<v>" + _TIGHT + ")", re.IGNORECASE),
    # user:password in a URL (an HTTP proxy's, `http://user:pass@host:port`): all of the userinfo,
    # up to the last @ before the host (a password may hold a raw @ itself).
    re.compile(r"(?P<k>[A-Za-z][A-Za-z0-9+.-]*://)(?P<v>[^/\s'\"\[\]]+)(?=@[^/\s@'\"]*(?:[/\s'\"]|$))"),
    # password='...' in a repr (aiohttp's BasicAuth for the proxy).
    re.compile(r"(?P<k>\bpassword\b['\"]?\s*[:=]\s*['\"]?)(?P<v>" + _TIGHT + ")", re.IGNORECASE),
]


def remember_secret(secret: str) -> None:
    """Mask secret verbatim in everything redact() sees from now on (too short ones are left to patterns)."""
    if len(secret) >= _MIN_KNOWN_SECRET:
        _KNOWN_SECRETS.add(secret)


def redact(text: str) -> str:
    """Mask SharedAccessKey, SharedAccessSignature, `sig=` and Authorization values in any text."""
    if not text:
        return text
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group("k") + _MASK, text)
    for secret in _KNOWN_SECRETS:
        if secret in text:
            text = text.replace(secret, _MASK)
    return text


def is_loopback(host: str) -> bool:
    """Whether host names this machine only (so serving without a key exposes nothing)."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
