"""A hand-rolled AMQP 1.0 client for hostile-wire tests: it writes frames a real SDK never would.

Proton's own client obeys flow control and frame limits, so floods and oversized frames are
built here byte by byte (performatives encoded with proton's Data codec).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from proton import Data, Described, symbol, ubyte, uint, ulong

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
OPEN, BEGIN, ATTACH, FLOW, TRANSFER = 0x10, 0x11, 0x12, 0x13, 0x14
SASL_INIT, SOURCE, TARGET = 0x41, 0x28, 0x29


def frame(code: int, fields: list[Any], payload: bytes = b"", *, channel: int = 0, kind: int = 0) -> bytes:
    """One frame: header, the performative `code` with its fields, then the payload."""
    data = Data()
    data.put_object(Described(ulong(code), fields))
    body = data.encode() + payload
    return struct.pack(">IBBH", 8 + len(body), 2, kind, channel) + body


def sasl_anonymous() -> bytes:
    """The SASL header and an ANONYMOUS init, then the AMQP header (pipelined)."""
    return SASL_HEADER + frame(SASL_INIT, [symbol("ANONYMOUS")], kind=1) + AMQP_HEADER


def open_session(container: str = "hostile") -> bytes:
    """open + begin on channel 0 with generous windows."""
    return frame(OPEN, [container]) + frame(BEGIN, [None, uint(0), uint(2**31 - 1), uint(2**31 - 1)])


def attach_sender(address: str, handle: int = 0, name: str = "flood") -> bytes:
    """Attach a link on which this client sends to `address` (role sender = False)."""
    source = Described(ulong(SOURCE), ["hostile"])
    target = Described(ulong(TARGET), [address])
    return frame(ATTACH, [name, uint(handle), False, ubyte(2), ubyte(0), source, target, None, None, uint(0)])


def transfer(chunk: bytes, *, delivery_id: int = 0, more: bool = True, handle: int = 0, first: bool = True) -> bytes:
    """One transfer frame of a (multi-frame) delivery; only the first names the delivery."""
    if first:
        fields: list[Any] = [uint(handle), uint(delivery_id), b"tag", uint(0), False, more]
    else:
        fields = [uint(handle), None, None, None, None, more]
    return frame(TRANSFER, fields, chunk)


def wait_for(sock: socket.socket, marker: bytes, seconds: float = 60.0) -> bytes:
    """Read until `marker` shows up or the server closes; what was read. `seconds` is a hang guard."""
    deadline = time.monotonic() + seconds
    got = b""
    while marker not in got:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except OSError:  # the guard ran out, or the connection was reset
            break
        if not data:
            break
        got += data
    return got


def cbs_flood(port: int, total: int, *, polite: bool = True, address: str = "$cbs", end: bool = False) -> bytes:
    """One endless delivery onto `$cbs` (or another address) before any token; what the server answered.

    polite: wait for the server's attach first (as a client obeying the session window
    does); otherwise pipeline everything and break the window. end: finish the delivery
    after `total` bytes. An address other than `$cbs` is attached after a put-token (no
    link works without one), on handle 2.
    """
    with connect(port) as sock:
        handle = 0
        if address == "$cbs":
            sock.sendall(sasl_anonymous() + open_session() + attach_sender(address))
        else:
            authorize(sock, address)
            handle = 2
            sock.sendall(attach_sender(address, handle))
        answer = wait_for(sock, address.encode()) if polite else b""
        chunk, sent = b"y" * 30000, 0
        try:
            sock.sendall(transfer(b"x" * 1000, handle=handle, delivery_id=handle and 1))
            while sent < total:
                sock.sendall(transfer(chunk, first=False, handle=handle))
                sent += len(chunk)
            if end:
                sock.sendall(transfer(b"", first=False, more=False, handle=handle))
        except OSError:
            pass  # the server closed the connection
        return answer + drain(sock, 0.5)


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    """A TCP connection to the listener on loopback."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def drain(sock: socket.socket, seconds: float = 0.2) -> bytes:
    """Whatever the server sent within `seconds` (b'' if it closed)."""
    sock.settimeout(seconds)
    chunks = []
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    except (TimeoutError, BlockingIOError):
        pass
    except OSError:
        pass
    return b"".join(chunks)


FLOW_FIELDS = [uint(0), uint(2**31 - 1), uint(0), uint(2**31 - 1)]  # session part of a flow


def attach_receiver(address: str, handle: int, name: str) -> bytes:
    """Attach a link on which this client receives from `address` (role receiver = True); target = name."""
    source = Described(ulong(SOURCE), [address])
    target = Described(ulong(TARGET), [name])
    return frame(ATTACH, [name, uint(handle), True, ubyte(0), ubyte(0), source, target])


def flow(handle: int, credit: int) -> bytes:
    """Give the server `credit` deliveries on our receiving link `handle`."""
    return frame(FLOW, [*FLOW_FIELDS, uint(handle), uint(0), uint(credit)])


def message_transfer(payload: bytes, *, handle: int, delivery_id: int, tag: bytes, message_format: int = 0) -> bytes:
    """A whole unsettled delivery in one transfer frame, with the given message-format."""
    fields: list[Any] = [uint(handle), uint(delivery_id), tag, uint(message_format), False, False]
    return frame(TRANSFER, fields, payload)


def section(code: int, value: Any) -> bytes:
    """One encoded message section (described by its ulong code)."""
    data = Data()
    data.put_object(Described(ulong(code), value))
    return data.encode()


def put_token_request(audience: str, token: str, reply_to: str) -> bytes:
    """An encoded `$cbs` put-token request."""
    properties = section(0x73, ["put-token-1", None, None, None, reply_to])
    app = section(0x74, {"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience})
    return properties + app + section(0x77, token)


def performatives(stream: bytes) -> list[tuple[int, list[Any], bytes]]:
    """The AMQP frames in what a server sent: (performative code, fields, payload) each."""
    out: list[tuple[int, list[Any], bytes]] = []
    pos = 0
    while pos + 8 <= len(stream):
        if stream[pos : pos + 4] == b"AMQP":
            pos += 8
            continue
        size, doff = struct.unpack_from(">IB", stream, pos)
        if pos + size > len(stream):
            break  # the rest has not arrived yet
        body = stream[pos + doff * 4 : pos + size]
        pos += size
        if not body:
            continue  # an empty (heartbeat) frame
        data = Data()
        used = data.decode(body)
        data.rewind()
        data.next()
        described = data.get_object()
        out.append((int(described.descriptor), list(described.value or []), body[used:]))
    return out


def authorize(sock: socket.socket, address: str, token: str | None = None) -> bytes:
    """SASL ANONYMOUS, open, begin, and a put-token for `address` on `$cbs` (handles 0 and 1,
    delivery 0), waiting for the reply as a client obeying the protocol does; what was read."""
    # well-formed, for the whole namespace: what a keyless listener takes
    token = token or "SharedAccessSignature sr=sb%3A%2F%2F127.0.0.1%2F&sig=y&se=9999999999&skn=k"
    sock.sendall(
        sasl_anonymous()
        + open_session()
        + attach_sender("$cbs", 0, "cbs-requests")
        + attach_receiver("$cbs", 1, "cbs-replies")
        + flow(1, 10)
    )
    seen = wait_for(sock, b"cbs-replies", 30)
    request = put_token_request(f"amqp://127.0.0.1/{address}", token, "cbs-replies")
    sock.sendall(message_transfer(request, handle=0, delivery_id=0, tag=b"t0"))
    return seen + wait_for(sock, b"status-description", 30)


def send_after_token(
    port: int, address: str, payload: bytes, *, message_format: int = 0, token: str | None = None
) -> Any:
    """Put a token for `address` on `$cbs`, then send one delivery to it; the delivery's disposition.

    The exchange waits for each answer it needs (put-token reply, the link's attach) as a
    client obeying the protocol does; the answer is the disposition's state (proton's
    Described: 0x24 accepted, 0x25 rejected with its error).
    """
    with connect(port, timeout=30.0) as sock:
        seen = authorize(sock, address, token)
        sock.sendall(attach_sender(address, 2, "batch-sender"))
        seen += wait_for(sock, b"batch-sender", 30)
        sock.sendall(message_transfer(payload, handle=2, delivery_id=1, tag=b"t1", message_format=message_format))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen += wait_for(sock, b"\x00\x53\x15", 0.5)
            for code, fields, _ in performatives(seen):
                if code == 0x15 and fields[0] is True and fields[1] == 1:  # role receiver, our delivery 1
                    return fields[4]
        raise AssertionError("no disposition for the delivery")
