"""The sidecar of a replay: which lines of its input the broker has accepted, so `--resume` skips them.

One header line ties it to the input's content (a SHA-256 of the file), then one line number
per accepted record, appended and fsynced after each accepted send chunk, and `finished` once
every selected record was accepted: a `--resume` after that sends nothing. A kill -9 can only
lose the numbers of the chunks in flight (at most --concurrency lines), which a resumed run
then sends again. The file is locked for the run: two replays never share one.

sbdlq never deletes a state file, and writes only to one that is new, empty, or its own
record of this same input: a file of anything else (another input's state, a file that is
no state at all, a device) is refused and left as it was.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from sbdlq.errors import BadInput, OperationFailed

_MAGIC = "sbdlq-replay-state 1 sha256="
_FINISHED = "finished"


class ReplayState:
    """An open, locked sidecar file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise BadInput(f"cannot write replay state {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise OperationFailed(
                f"{path} is in use by another sbdlq replay of the same input", hint="wait for it to finish"
            ) from None
        except OSError:
            pass  # no flock on this filesystem: one replay at a time is then the operator's job
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise BadInput(f"{path} is not a regular file, so no replay state", hint="name another file with --state")
        #: whether this file is this input's record (load() said so): only then is it written to
        self.owned = False
        #: whether it records a replay that finished (load() read `finished`)
        self.finished = False

    def load(self, digest: str) -> set[int]:
        """The lines already accepted; starts the file when it is new or empty. Refuses (and leaves
        as it is) a file that is not a state, or the state of another input."""
        data = self._read()
        if not data:
            self._append(f"{_MAGIC}{digest}\n")
            self.owned = True
            return set()
        text = data.decode("utf-8", errors="replace")
        header, _, rest = text.partition("\n")
        if not header.startswith(_MAGIC):
            raise BadInput(f"{self.path} is not an sbdlq replay state file", hint="name another file with --state")
        if header[len(_MAGIC) :] != digest:
            raise BadInput(
                f"{self.path} records a replay of different content: the input changed since",
                hint="delete it to replay the whole input again",
            )
        self.owned = True
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            # Cut while the numbers of an accepted chunk were written: resent, at most a chunk.
            os.ftruncate(self.fd, whole)
        lines = rest.split("\n")[:-1]
        self.finished = _FINISHED in lines
        return {int(n) for n in lines if n.strip().isdigit()}

    def finish(self) -> None:
        """Record that every selected line was accepted: a `--resume` of this input sends nothing."""
        if self.owned and not self.finished:
            self._append(f"{_FINISHED}\n")
            self.finished = True

    def record(self, lines: Iterable[int]) -> None:
        """Append these accepted lines, synced: after this a resumed run does not send them again."""
        text = "".join(f"{n}\n" for n in lines)
        if text:
            self._append(text)

    def _append(self, text: str) -> None:
        data = memoryview(text.encode("ascii"))
        try:
            while data:
                data = data[os.write(self.fd, data) :]
            os.fsync(self.fd)
        except OSError as exc:
            raise OperationFailed(f"cannot write replay state {self.path}: {exc.strerror or exc}") from None

    def _read(self) -> bytes:
        size = os.fstat(self.fd).st_size
        return os.pread(self.fd, size, 0) if size else b""

    def close(self) -> None:
        """Release the lock; the file stays (sbdlq never deletes a state file)."""
        os.close(self.fd)


def finished_replay(path: Path) -> bool:
    """Whether a state file records a replay that finished (False for anything unreadable)."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_MAGIC))
            if head.decode("ascii", errors="replace") != _MAGIC:
                return False
            f.seek(max(0, path.stat().st_size - 64))
            return f"\n{_FINISHED}\n".encode() in b"\n" + f.read()
    except OSError:
        return False
