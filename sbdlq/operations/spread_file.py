"""The record of a spread: which copy of which original the broker scheduled, and when.

One file per spread in the state dir (`spreads/ID.jsonl`), created new (O_EXCL: a file
already there, anyone's, is never opened for writing), mode 0600. A header line says what
the spread is; then one line per copy, appended and fsynced as each chunk's schedule is
confirmed and before its originals are completed; then `finished` with the run's counts.
`spread cancel` appends the copies it cancelled. A kill -9 can only cut the last line
(a reader drops a line that does not end), so the file stays readable whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sbdlq.errors import BadInput, OperationFailed
from sbdlq.statedir import state_dir
from sbdlq.timeparse import parse_time

FORMAT = 1
_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$")


def spreads_dir() -> Path:
    """Where spread records live (SBDLQ_STATE_DIR moves it)."""
    return state_dir("spreads")


def new_spread_id(now: datetime) -> str:
    """A spread id: when it started (UTC) and a random part, e.g. 20261128T214957Z-3f9a0c."""
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def spread_path(spread_id: str) -> Path:
    """The record of a spread id; refuses what is not one (no path can be named through it)."""
    if not _ID.match(spread_id):
        raise BadInput(f"{spread_id!r} is not a spread id", hint="`sbdlq spread list` shows them")
    return spreads_dir() / f"{spread_id}.jsonl"


@dataclass(frozen=True, slots=True)
class CopyRecord:
    """One scheduled copy: its original's sequence number, its own, when it becomes active."""

    original: int
    copy: int
    at: datetime
    message_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.original, "copy": self.copy, "at": self.at.isoformat(), "message_id": self.message_id}


class SpreadWriter:
    """A new spread record, open for appending."""

    def __init__(self, spread_id: str, header: dict[str, Any]) -> None:
        self.path = spread_path(spread_id)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
        try:
            self.fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise OperationFailed(f"cannot create spread record {self.path}: {exc.strerror or exc}") from None
        self._append([{"sbdlq_spread": FORMAT, "id": spread_id, **header}])
        _sync_dir(self.path.parent)

    def record(self, copies: Iterable[CopyRecord]) -> None:
        """Append confirmed copies, synced: after this, `spread cancel` finds them."""
        self._append([c.to_json() for c in copies])

    def finish(self, counts: dict[str, Any]) -> None:
        """Record that the run ended, with its counts."""
        self._append([{"finished": counts}])

    def _append(self, docs: list[dict[str, Any]]) -> None:
        if not docs:
            return
        _write_lines(self.fd, docs, self.path)

    def close(self) -> None:
        os.close(self.fd)


def append_to(spread_id: str, docs: list[dict[str, Any]]) -> None:
    """Append lines to an existing spread record (`spread cancel`), synced; only a regular file."""
    path = spread_path(spread_id)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    except OSError as exc:
        raise OperationFailed(f"cannot write spread record {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OperationFailed(f"{path} is not a regular file")
        _write_lines(fd, docs, path)
    finally:
        os.close(fd)


def _write_lines(fd: int, docs: list[dict[str, Any]], path: Path) -> None:
    """Whole JSON lines, written and synced."""
    data = memoryview("".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs).encode())
    try:
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    except OSError as exc:
        raise OperationFailed(f"cannot write spread record {path}: {exc.strerror or exc}") from None


def _sync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(slots=True)
class SpreadDoc:
    """A spread record as read back."""

    id: str
    header: dict[str, Any]
    copies: list[CopyRecord] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    #: copy sequence number → where `spread cancel` put it ("export FILE", "sent to ENTITY")
    cancelled: dict[int, str] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return str(self.header.get("target", ""))

    @property
    def start(self) -> datetime:
        return parse_time(str(self.header["start"]), what="start")

    @property
    def end(self) -> datetime:
        return parse_time(str(self.header["end"]), what="end")


def read_spread(spread_id: str) -> SpreadDoc:
    """The record of a spread; BadInput when there is none or it is not one."""
    path = spread_path(spread_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"no spread {spread_id} on this machine", hint="`sbdlq spread list` shows them") from None
    except OSError as exc:
        raise OperationFailed(f"cannot read spread record {path}: {exc.strerror or exc}") from None
    lines = _whole_lines(data)
    try:
        header = json.loads(next(lines))
    except (StopIteration, ValueError):
        header = None
    if not isinstance(header, dict) or header.get("sbdlq_spread") != FORMAT:
        raise BadInput(f"{path} is not an sbdlq spread record")
    doc = SpreadDoc(spread_id, header)
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if "copy" in item:
            at = parse_time(item["at"], what="at")
            doc.copies.append(CopyRecord(int(item["seq"]), int(item["copy"]), at, item.get("message_id")))
        elif "finished" in item:
            doc.finished = item["finished"]
        elif "cancelled" in item:
            doc.cancelled.update((int(n), str(item.get("to", ""))) for n in item["cancelled"])
    return doc


def _whole_lines(data: bytes) -> Iterator[str]:
    """The lines that end (a kill may have cut the last one)."""
    end = data.rfind(b"\n") + 1
    for raw in data[:end].split(b"\n")[:-1]:
        yield raw.decode("utf-8", errors="replace")


def list_spreads() -> list[SpreadDoc]:
    """Every spread record of this machine, oldest first (files that are none are passed over)."""
    folder = spreads_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        try:
            found.append(read_spread(path.stem))
        except (BadInput, OperationFailed):
            continue
    # Ids of one second sort by their random part: the creation time orders them.
    return sorted(found, key=lambda d: (str(d.header.get("created", "")), d.id))
