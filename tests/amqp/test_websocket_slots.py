"""WebSocket clients that stay connected must not starve the HTTP port.

Each upgraded connection used to keep its HTTP request slot for its whole life, so
`http_max_clients` (64) admitted AMQP-over-WebSocket clients (a pool of SDK clients, or one
hostile local process) made /health, the ATOM admin reads and every further WebSocket client
get a closed connection. Once upgraded, a connection is bounded by the AMQP listener's
connection cap (its relay is one of the listener's connections), not by the HTTP slots.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import urllib.request
from typing import Any

import pytest

pytest.importorskip("proton")

import raw_amqp

from sbdlq.emulator.amqp.limits import HTTP_TIMEOUT_S, Limits


def _ws_frame(payload: bytes) -> bytes:
    """One final, masked binary frame (what a client sends)."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return struct.pack("!BBH", 0x82, 0x80 | 126, len(payload)) + mask + masked


def _open_over_websocket(http_port: int) -> socket.socket:
    """Upgrade, then SASL ANONYMOUS + open + begin; returns once the listener's open came back."""
    sock = socket.create_connection(("127.0.0.1", http_port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET /$servicebus/websocket HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n\r\n"
        ).encode()
    )
    assert b" 101 " in raw_amqp.wait_for(sock, b"\r\n\r\n")
    sock.sendall(_ws_frame(raw_amqp.sasl_anonymous() + raw_amqp.open_session()))
    assert b"sbdlq-emulator" in raw_amqp.wait_for(sock, b"sbdlq-emulator")
    return sock


def test_connected_websocket_clients_leave_http_answering(launch: Any) -> None:
    emu = launch(limits=Limits(http_max_clients=4, max_connections=50))
    clients = [_open_over_websocket(emu.http_port) for _ in range(6)]  # more than the HTTP slots
    try:
        # Under the HTTP timeout: clients holding the slots would keep /health waiting past it.
        with urllib.request.urlopen(f"http://127.0.0.1:{emu.http_port}/health", timeout=HTTP_TIMEOUT_S / 2) as resp:
            assert json.loads(resp.read())["status"] == "ok"
    finally:
        for sock in clients:
            sock.close()
