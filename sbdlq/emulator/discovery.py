"""Where a running `sbdlq emulator serve` answers HTTP: one small file per AMQP port.

`emulator serve` writes the file once both ports listen and removes it on a clean stop. A
client that has only an emulator connection string (`Endpoint=sb://localhost;...;
UseDevelopmentEmulator=true`) reads it to find the HTTP (admin) port, so a server on
another port than 5300 needs no `SBDLQ_EMULATOR_HTTP_PORT`. A server started with `--tls`
also says that its HTTP port speaks HTTPS and which CA file signs its certificate, so the
client trusts that CA for this server (and no other). A file whose process is gone (a server
killed with -9) is ignored.

The files live in the user state dir (platformdirs): `.../sbdlq/servers/amqp-PORT.json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sbdlq.connstr import is_loopback

_ANY_ADDRESS = frozenset({"", "0.0.0.0", "::", "[::]"})


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """What a running listener says about itself."""

    host: str
    amqp_port: int
    http_port: int
    pid: int
    path: Path
    #: the HTTP port speaks HTTPS (`serve --tls`)
    https: bool = False
    #: the CA file that signs the server's certificate (None: the user's own certificate)
    ca: Path | None = None


def discovery_dir() -> Path:
    """The folder of the servers' files, in the user state dir."""
    from sbdlq.statedir import state_dir

    return state_dir("servers")


def _file(amqp_port: int) -> Path:
    return discovery_dir() / f"amqp-{amqp_port}.json"


def announce(host: str, amqp_port: int, http_port: int, *, https: bool = False, ca: Path | None = None) -> Path | None:
    """Record this process as the server on amqp_port; None when the file cannot be written.

    Written to a temporary name and renamed, so a reader never sees half a file.
    """
    path = _file(amqp_port)
    doc: dict[str, object] = {"host": host, "amqp_port": amqp_port, "http_port": http_port, "pid": os.getpid()}
    if https:
        doc |= {"https": True, "ca": str(ca) if ca is not None else None}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        return None  # discovery is a convenience: the server runs without it
    return path


def withdraw(path: Path) -> None:
    """Remove this process's file (not one a later server on the same port wrote)."""
    record = _read(path)
    if record is not None and record.pid == os.getpid():
        with contextlib.suppress(OSError):
            path.unlink()


def find(host: str, amqp_port: int) -> ServerRecord | None:
    """The live server listening on host:amqp_port, if one recorded itself."""
    record = _read(_file(amqp_port))
    if record is None or record.amqp_port != amqp_port or not _same_host(host, record.host):
        return None
    return record if _alive(record.pid) else None


def owner_of_http_port(http_port: int) -> ServerRecord | None:
    """The live server that recorded http_port as its HTTP port, if any (whatever its AMQP port)."""
    try:
        paths = sorted(discovery_dir().glob("amqp-*.json"))
    except OSError:
        return None
    for path in paths:
        record = _read(path)
        if record is not None and record.http_port == http_port and _alive(record.pid):
            return record
    return None


def _read(path: Path) -> ServerRecord | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        record = ServerRecord(
            host=str(doc["host"]),
            amqp_port=int(doc["amqp_port"]),
            http_port=int(doc["http_port"]),
            pid=int(doc["pid"]),
            path=path,
            https=doc.get("https") is True,
            ca=Path(doc["ca"]) if isinstance(doc.get("ca"), str) else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing, or not ours: as if no server recorded itself
    return record if 0 < record.http_port < 65536 and record.pid > 0 else None


def _same_host(client_host: str, bound_host: str) -> bool:
    """Whether a client naming client_host reaches a server bound to bound_host on this machine."""
    if client_host.lower() == bound_host.lower():
        return True
    return is_loopback(client_host) and (bound_host in _ANY_ADDRESS or is_loopback(bound_host))


def _alive(pid: int) -> bool:
    """Whether a process with this id exists."""
    if sys.platform == "win32":
        return True  # os.kill(pid, 0) would terminate it there; a stale file only costs a fallback
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True
