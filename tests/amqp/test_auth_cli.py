"""A wrong SAS key at the CLI: exit 5, one line naming the host, no secret, and no retried connection."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.proxy import DelayingProxy

pytest.importorskip("proton")

WRONG_KEY = "not-the-key-0123456789"
#: --timeout for the run: long, so that waiting for any part of it cannot pass for "at once".
TIMEOUT_S = 600.0


@pytest.fixture
def proxy(keyed_emulator: Any) -> Iterator[DelayingProxy]:
    # No delay: it is here to count the connections made through it.
    forwarder = DelayingProxy(keyed_emulator.port)
    yield forwarder
    forwarder.close()


@pytest.mark.parametrize("command", ["peek", "count"])
def test_wrong_key_is_exit_5_at_once_without_retrying(
    command: str, keyed_emulator: Any, proxy: DelayingProxy, cli: Any
) -> None:
    q = keyed_emulator.queue()
    conn = keyed_emulator.conn_str(key=WRONG_KEY).replace(f":{keyed_emulator.port};", f":{proxy.port};")
    # count asks the admin endpoint first (refused too: 401), then falls back to AMQP.
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(keyed_emulator.http_port)}
    started = time.monotonic()
    code, out, err = cli.bare("--timeout", f"{TIMEOUT_S:g}s", "--connection-string", conn, command, q, env=env)
    elapsed = time.monotonic() - started
    assert code == 5, err
    assert err == f"sbdlq: authentication failed for 127.0.0.1:{proxy.port} (check the key / role)\n"
    assert out == ""
    assert WRONG_KEY not in err and keyed_emulator.key not in err
    # The SDK retries what it believes transient by reconnecting: a refused key is not.
    assert proxy.connections == 1
    # At the refusal, not at a timeout: an attempt waiting for its try timeout (a quarter of
    # --timeout) would take far longer than this, however busy the machine.
    assert elapsed < TIMEOUT_S / 10, f"took {elapsed:.1f}s"
