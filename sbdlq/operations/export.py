"""JSONL export that survives a kill -9: whole lines, flushed and synced before deletes.

`Exporter` writes the file (purge --export writes each message before deleting it, marked
`"sbdlq_deleted": 0`, and sets the mark to 1 once the delete is confirmed: after a kill the
file alone tells which records may still be in the DLQ, and `replay` holds those back);
`export_messages` browses a selection into one and deletes nothing (the console's export).
Both make the file only when the first record is about to be written (`LazyExporter`).

The export file is the only copy of a purged message, so the exporter treats it as someone
else's data until proven otherwise: it refuses a symlink (unless asked to follow it), refuses
an existing file that is not an sbdlq export, holds an exclusive lock for the whole run (two
runs appending to one file would tear each other's lines), and never truncates anything but
its own failed write or, under that lock and before writing, a torn record from a crashed run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from sbdlq.addresses import Address
from sbdlq.errors import BadInput, OperationFailed
from sbdlq.models import Message
from sbdlq.operations.records import DELETED_KEY, RECORD_PREFIX
from sbdlq.results import RunResult
from sbdlq.selection import Selection

if TYPE_CHECKING:
    from sbdlq.backends.base import Backend
    from sbdlq.operations.moving_run import Progress

_RECORD_PREFIX = RECORD_PREFIX
_RECORD_START = re.compile(re.escape(_RECORD_PREFIX) + rb"\d")
# How much of the first line is read to tell whether the file is an export.
_HEAD_BYTES = 4096
#: Messages written (and synced) at a time by `export_messages`.
EXPORT_BATCH = 500


def check_export_target(path: Path, *, follow_symlinks: bool) -> None:
    """Refuse a symlink or an existing file that isn't an sbdlq export (BadInput), without changing it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadInput(f"cannot read export file {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode) and not follow_symlinks:
        raise BadInput(
            f"--export {path} is a symlink; refusing to write through it", hint="add --export-follow-symlinks"
        )
    # Opened without blocking and checked on the descriptor: a FIFO (or a file swapped for one
    # since the lstat) would block a plain open or read forever, deaf to SIGTERM.
    nofollow = 0 if follow_symlinks else os.O_NOFOLLOW
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | nofollow)
    except FileNotFoundError:
        return  # a dangling symlink, followed: the export creates its target
    except OSError as exc:
        raise BadInput(f"cannot read export file {path}: {exc.strerror or exc}") from None
    try:
        _check_regular(path, os.fstat(fd))
        head = os.pread(fd, _HEAD_BYTES, 0)
    except OSError as exc:
        raise BadInput(f"cannot read export file {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    _check_head(path, head)


def _check_regular(path: Path, st: os.stat_result) -> None:
    """Only a regular file keeps an export: a FIFO blocks, a device (/dev/null) swallows what is deleted."""
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"--export {path} is not a regular file; refusing to write to it", hint="name a new file")


def _check_head(path: Path, head: bytes) -> None:
    """The file's first bytes must start an export record (and, when whole, the first line must be one)."""
    if not head:
        return
    first, newline, _ = head.partition(b"\n")
    looks_like_export = _starts_record(first)
    if looks_like_export and newline:
        try:
            looks_like_export = isinstance(json.loads(first), dict)
        except ValueError:
            looks_like_export = False
    if not looks_like_export:
        raise BadInput(
            f"--export {path} exists and is not an sbdlq JSONL export; refusing to append to it",
            hint="name a new file",
        )


def _starts_record(data: bytes) -> bool:
    """Whether `data` is the start of an export record (a kill -9 may have cut it anywhere)."""
    if _RECORD_START.match(data) is not None:
        return True
    return 0 < len(data) <= len(_RECORD_PREFIX) and _RECORD_PREFIX.startswith(data)


class Exporter:
    """Appends messages to a JSONL file it holds an exclusive lock on for its whole life.

    `new=True`: the file must not exist (O_EXCL), as `apply` names a new file per step.
    """

    def __init__(self, path: Path, *, follow_symlinks: bool = False, new: bool = False) -> None:
        self.path = path
        if not new:
            check_export_target(path, follow_symlinks=follow_symlinks)
        created = new or not path.exists()
        # No O_APPEND: `confirm` writes a byte inside a record, and Linux's pwrite on an O_APPEND
        # descriptor appends instead. Every write is at an offset this run chose under its lock.
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if new else 0) | (0 if follow_symlinks else os.O_NOFOLLOW)
        try:
            self.fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if new:  # apply's own name for the file: a failure there is the run's, not the user's input
                raise OperationFailed(f"cannot create export file {path}: {exc.strerror or exc}") from None
            raise BadInput(f"cannot write export file {path}: {exc.strerror or exc}") from None
        try:
            _check_regular(path, os.fstat(self.fd))
            self._lock()
            # Checked again under the lock: another run may have written it since.
            _check_head(path, os.pread(self.fd, _HEAD_BYTES, 0))
            if created:
                self._sync_directory()
            self._repair()
        except BaseException:
            os.close(self.fd)
            raise

    def _lock(self) -> None:
        """Exclusive for the whole run; a second run refuses instead of interleaving its lines."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OperationFailed(
                f"{self.path} is being written by another sbdlq run; nothing was deleted",
                hint="wait for it to finish, or export to another file",
            ) from None
        except OSError:
            pass  # a filesystem without flock (some network mounts): one writer is then the operator's job

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
        """Drop a torn last record from a crashed run: its message was never completed, so it is still in the DLQ.

        Only a tail that starts like an export record is ours to cut; anything else is refused.
        """
        size = os.fstat(self.fd).st_size
        if size == 0 or os.pread(self.fd, 1, size - 1) == b"\n":
            return
        keep = self._last_line_start(size)
        if not _starts_record(os.pread(self.fd, min(64, size - keep), keep)):
            raise BadInput(
                f"--export {self.path} ends with a partial line that is not an sbdlq export record; "
                "refusing to change it",
                hint="name a new file",
            )
        os.ftruncate(self.fd, keep)
        os.fsync(self.fd)

    def _last_line_start(self, size: int) -> int:
        """Offset just after the last newline (0 when there is none); scans back block by block."""
        end = size
        while end > 0:
            start = max(0, end - 65536)
            i = os.pread(self.fd, end - start, start).rfind(b"\n")
            if i >= 0:
                return start + i + 1
            end = start
        return 0

    def write(self, messages: list[Message]) -> None:
        """Write whole lines, then fsync (the console's export: nothing is deleted after it)."""
        self._append("".join(json.dumps(m.to_json(), ensure_ascii=False) + "\n" for m in messages).encode("utf-8"))

    def write_pending(self, messages: list[Message]) -> list[int]:
        """Write whole lines marked `"sbdlq_deleted": 0`, then fsync: after this the messages are safe
        to delete. Returns where each one's mark is, for `confirm`."""
        lines = [
            (json.dumps({**m.to_json(), DELETED_KEY: 0}, ensure_ascii=False) + "\n").encode("utf-8") for m in messages
        ]
        at = self._append(b"".join(lines))
        marks = []
        for line in lines:
            at += len(line)
            marks.append(at - 3)  # the 0 of `0}\n`: the key is the record's last
        return marks

    def confirm(self, marks: list[int]) -> None:
        """Set the marks of records whose delete went through to 1, in place (one byte each: a kill
        leaves each one 0 or 1, never a torn line). Not synced: kill -9 keeps the page cache, and a
        mark an OS crash loses only makes replay hold that record back (the next write syncs them)."""
        try:
            size = os.fstat(self.fd).st_size
            for at in marks:
                if at < size:  # never past the end: a file cut by someone else is not extended
                    os.pwrite(self.fd, b"1", at)
        except OSError as exc:
            raise OperationFailed(
                f"cannot mark deleted records in export file {self.path}: {exc.strerror or exc}"
            ) from None

    def _append(self, data: bytes) -> int:
        """Write `data` at the end and fsync; where it starts. On failure nothing of it is left."""
        start = os.fstat(self.fd).st_size
        try:
            view, at = memoryview(data), start
            while view:
                n = os.pwrite(self.fd, view, at)
                view, at = view[n:], at + n
            os.fsync(self.fd)
        except OSError as exc:
            # Cut what reached the file so it stays whole lines (everything past `start` is
            # ours: we hold the lock); if even that fails, the next run's repair drops the torn line.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise OperationFailed(f"cannot write export file {self.path}: {exc.strerror or exc}") from None
        return start

    def close(self) -> None:
        """Sync the last marks, then close the file, which releases the lock."""
        with contextlib.suppress(OSError):
            os.fsync(self.fd)
        os.close(self.fd)


@dataclass(slots=True)
class ExportResult(RunResult):
    """What `export_messages` did: messages written to the file, none deleted."""

    VERB: ClassVar[str] = "exported"
    JSON_COUNTS: ClassVar[tuple[str, ...]] = ("exported",)

    exported: int = 0


async def export_messages(
    backend: Backend,
    source: Address,
    path: Path,
    *,
    selection: Selection | None = None,
    follow_symlinks: bool = False,
    dry_run: bool = False,
    note: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
) -> ExportResult:
    """Browse the selection into a JSONL export file (locked, whole lines, synced); nothing is deleted.

    The file is checked before the plan, as `purge --export` checks it, and holds the records
    `replay` reads back.
    """
    # Lazily: a command that only reads an export file does not load the browsing machinery.
    from sbdlq.operations.browse import iter_messages
    from sbdlq.operations.planning import plan_run

    selection = selection or Selection()
    result = ExportResult(dry_run=dry_run)
    check_export_target(path, follow_symlinks=follow_symlinks)
    await backend.get_entity(source.entity)
    started = time.monotonic()
    result.selected = (await plan_run(backend, source, selection, max_count=None, scan=True)).selected
    note(f"plan: export {result.selected} message(s) from {source} to {path}" + (" (dry run)" if dry_run else ""))
    if dry_run or result.selected == 0:
        return result
    tick = progress(result.selected) if progress else None
    file = LazyExporter(path, follow_symlinks=follow_symlinks)
    try:
        batch: list[Message] = []
        async for m in iter_messages(backend, source, selection=selection):
            batch.append(m)
            if len(batch) >= EXPORT_BATCH:
                result.exported += _write_batch(file, batch, tick)
        result.exported += _write_batch(file, batch, tick)
    finally:
        file.close()
    result.elapsed_s = time.monotonic() - started
    return result


def _write_batch(file: LazyExporter, batch: list[Message], tick: Callable[[int], None] | None) -> int:
    """Write (synced) and empty the batch; how many went."""
    if not batch:
        return 0
    file.open().write(batch)
    n = len(batch)
    batch.clear()
    if tick:
        tick(n)
    return n


class LazyExporter:
    """An Exporter made when the first record is about to be written: a run that writes nothing
    makes no file (an existing one is opened, and locked, at once by whoever wants that)."""

    def __init__(self, path: Path, *, follow_symlinks: bool = False, new: bool = False) -> None:
        self.path, self.follow_symlinks, self.new = path, follow_symlinks, new
        self.exporter: Exporter | None = None

    def open(self) -> Exporter:
        """The Exporter, made (created, locked, repaired) on the first call."""
        if self.exporter is None:
            self.exporter = Exporter(self.path, follow_symlinks=self.follow_symlinks, new=self.new)
        return self.exporter

    def close(self) -> None:
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
