"""Faults a test injects at the OS boundary."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest

# Every export record is one JSON line that starts with its sequence number.
EXPORT_RECORD = b'{"sequence_number"'


def disk_full_after_exports(monkeypatch: pytest.MonkeyPatch, records: int) -> None:
    """Let `records` export writes of records reach the disk, then fail every further one with ENOSPC.

    The exporter writes at offsets it chose (`os.pwrite`): a batch's records in one call, and
    a byte per record once its delete is confirmed.
    """
    real_pwrite = os.pwrite
    written = 0

    def pwrite(fd: int, data: Any, offset: int) -> int:
        nonlocal written
        if bytes(data[: len(EXPORT_RECORD)]) == EXPORT_RECORD:
            written += 1
            if written > records:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)


def disk_full_for_replay_state(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """Let `after` writes of a replay state's line numbers reach the disk, then fail each with ENOSPC."""
    real_write = os.write
    written = 0

    def write(fd: int, data: Any) -> int:
        nonlocal written
        head = bytes(data[:1])
        if head.isdigit():  # the state's lines are numbers; its header starts with a letter
            written += 1
            if written > after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
