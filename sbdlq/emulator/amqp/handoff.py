"""One port for AMQPS and HTTPS: a TLS connection whose first bytes are an HTTP request is
handed from the AMQP loop to the HTTP server, with the bytes already read.

Node's admin client and the Python one dial HTTPS on the endpoint's port, and Node dials AMQPS
there too: with the AMQPS port answering both, one `Endpoint=sb://localhost:5671` serves every stack.
"""

from __future__ import annotations

import io
import socket
from typing import Any

#: What an AMQP client sends first: "AMQP" and the protocol id (0 AMQP, 2 TLS, 3 SASL).
AMQP_MAGIC = b"AMQP"
#: Enough of the first bytes to tell AMQP from an HTTP request line.
SNIFF_BYTES = len(AMQP_MAGIC)
_METHODS = (b"GET ", b"PUT ", b"POST", b"DELE", b"HEAD", b"OPTI", b"PATC")


def is_http(first: bytes) -> bool:
    """Whether a connection's first bytes begin an HTTP request (never when they begin AMQP)."""
    return not first.startswith(AMQP_MAGIC) and first[:SNIFF_BYTES] in _METHODS


class _Replayed(io.RawIOBase):
    """Reads the bytes already taken from the socket, then the socket."""

    def __init__(self, first: bytes, sock: socket.socket) -> None:
        self._first = memoryview(first)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._first:
            n = min(len(buffer), len(self._first))
            buffer[:n] = self._first[:n]
            self._first = self._first[n:]
            return n
        return self._sock.recv_into(buffer)


class Prefixed:
    """A socket whose first reads give back what was read from it before (the handler reads via makefile)."""

    def __init__(self, sock: socket.socket, first: bytes) -> None:
        self._sock = sock
        self._first = first

    def makefile(self, mode: str = "r", buffering: int | None = None, **kwargs: Any) -> Any:
        if "r" in mode:
            size = buffering if buffering is not None and buffering > 0 else io.DEFAULT_BUFFER_SIZE
            return io.BufferedReader(_Replayed(self._first, self._sock), size)
        return self._sock.makefile(mode, buffering, **kwargs)  # type: ignore[call-overload]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)
