"""Reading a file the user named: its bytes, or BadInput saying in one line why not."""

from __future__ import annotations

from pathlib import Path

from sbdlq.errors import BadInput


def read_named_file(path: str, name: str, *, directory: str = "is a directory") -> bytes:
    """The bytes of `path` (`~` expanded); BadInput starting with `name` (`directory`: what a directory is told)."""
    try:
        return Path(path).expanduser().read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{name}: no such file")
    except IsADirectoryError:
        raise BadInput(f"{name}: {directory}")
    except OSError as exc:
        raise BadInput(f"{name}: cannot read: {exc.strerror or exc}")
