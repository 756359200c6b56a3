"""One lock per policy file, so a second cron run of the same policy exits at once (exit 1).

The lock is an exclusive `flock` on a file in the user state dir named after the policy's
real path, symlinks resolved (`.../sbdlq/locks/<name>-<sha256 prefix>.lock`): a symlink to the
policy is the same policy (a run through it exits 1 while the file runs). It is held for the
whole run and released by the kernel when the process ends, however it ends (kill -9 included):
no stale lock is ever left to clean up. The holder's pid is written in it for the refusal's line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from sbdlq.errors import OperationFailed
from sbdlq.statedir import state_dir


def lock_path(policy: str) -> Path:
    """The lock file of a policy: one per real path (a symlink to it, or a `..` around, locks the same file)."""
    absolute = os.path.realpath(policy)
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(absolute).name)[:64]
    return state_dir("locks") / f"{stem}-{digest}.lock"


@contextlib.contextmanager
def policy_lock(policy: str) -> Iterator[Path]:
    """Hold the policy's lock; OperationFailed (exit 1) at once when another run holds it."""
    path = lock_path(policy)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise OperationFailed(f"cannot create the lock file {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            pid = f" (pid {holder})" if holder else ""
            raise OperationFailed(
                f"another sbdlq apply of {policy} is running{pid}; this run did nothing",
                hint="it runs the rules; let it finish",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)
