"""A wrong SAS key at the CLI: exit 5, one line naming the host, no secret, and no retried connection."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("proton")

WRONG_KEY = "not-the-key-0123456789"


class CountingProxy:
    """A TCP forwarder in front of the AMQP listener that counts the connections made through it."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, name="counting-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self._target))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def proxy(keyed_emulator: Any) -> Iterator[CountingProxy]:
    forwarder = CountingProxy(keyed_emulator.port)
    yield forwarder
    forwarder.close()


@pytest.mark.parametrize("command", ["peek", "count"])
def test_wrong_key_is_exit_5_at_once_without_retrying(
    command: str, keyed_emulator: Any, proxy: CountingProxy, cli: Any
) -> None:
    q = keyed_emulator.queue()
    conn = keyed_emulator.conn_str(key=WRONG_KEY).replace(f":{keyed_emulator.port};", f":{proxy.port};")
    # count asks the admin endpoint first (refused too: 401), then falls back to AMQP.
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(keyed_emulator.http_port)}
    started = time.monotonic()
    code, out, err = cli.bare("--connection-string", conn, command, q, env=env)
    elapsed = time.monotonic() - started
    assert code == 5, err
    assert err == f"sbdlq: authentication failed for 127.0.0.1:{proxy.port} (check the key / role)\n"
    assert out == ""
    assert WRONG_KEY not in err and keyed_emulator.key not in err
    # The SDK retries what it believes transient by reconnecting: a refused key is not.
    assert proxy.connections == 1
    assert elapsed < 5, f"took {elapsed:.1f}s"
