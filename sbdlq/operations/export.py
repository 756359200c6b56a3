"""JSONL export that survives a kill -9: whole lines, flushed and synced before deletes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sbdlq.errors import BadInput, OperationFailed
from sbdlq.models import Message


class Exporter:
    """Appends messages to a JSONL file; a torn last line from a crash is cut off first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise BadInput(f"cannot write export file {path}: {exc.strerror}")
        self._repair()

    def _repair(self) -> None:
        """Drop a partial last line: its message was never completed, so it is still in the DLQ."""
        size = os.fstat(self.fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
        keep = data.rfind(b"\n") + 1
        os.ftruncate(self.fd, keep)

    def write(self, messages: list[Message]) -> None:
        """Write whole lines in one call, then fsync: after this the messages are safe to delete."""
        data = "".join(json.dumps(m.to_json(), ensure_ascii=False) + "\n" for m in messages).encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            os.fsync(self.fd)
        except OSError as exc:
            # Whatever reached the file is a prefix; the next run repairs a torn line.
            raise OperationFailed(f"cannot write export file {self.path}: {exc.strerror}")

    def close(self) -> None:
        os.close(self.fd)
