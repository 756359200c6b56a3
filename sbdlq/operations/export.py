"""JSONL export that survives a kill -9: whole lines, flushed and synced before deletes."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from sbdlq.errors import BadInput, OperationFailed
from sbdlq.models import Message


class Exporter:
    """Appends messages to a JSONL file; a torn last line from a crash is cut off first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        created = not path.exists()
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise BadInput(f"cannot write export file {path}: {exc.strerror or exc}")
        if created:
            self._sync_directory()
        self._repair()

    def _sync_directory(self) -> None:
        """Make the new file's name durable: fsyncing the file alone doesn't survive an OS crash."""
        try:
            dir_fd = os.open(self.path.parent if str(self.path.parent) else ".", os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        except OSError:
            pass  # not every filesystem syncs directories; the file's own fsync still holds
        finally:
            os.close(dir_fd)

    def _repair(self) -> None:
        """Drop a partial last line: its message was never completed, so it is still in the DLQ."""
        size = os.fstat(self.fd).st_size
        if size == 0 or os.pread(self.fd, 1, size - 1) == b"\n":
            return
        # Scan back block by block for the last newline: export files can be large.
        end = size
        keep = 0
        while end > 0:
            start = max(0, end - 65536)
            block = os.pread(self.fd, end - start, start)
            i = block.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            end = start
        os.ftruncate(self.fd, keep)

    def write(self, messages: list[Message]) -> None:
        """Write whole lines, then fsync: after this the messages are safe to delete."""
        data = "".join(json.dumps(m.to_json(), ensure_ascii=False) + "\n" for m in messages).encode("utf-8")
        start = os.fstat(self.fd).st_size
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            os.fsync(self.fd)
        except OSError as exc:
            # Cut what reached the file so it stays whole lines; if even that fails, the
            # next run's repair drops the torn line.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise OperationFailed(f"cannot write export file {self.path}: {exc.strerror or exc}")

    def close(self) -> None:
        """Close the file (everything written is already synced)."""
        os.close(self.fd)
