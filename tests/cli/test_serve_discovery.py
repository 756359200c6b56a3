"""An sbdlq client given only an emulator connection string finds `emulator serve`'s HTTP port."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.serve_process import EMULATOR_CONN, seed_orders, serve_process

from sbdlq.emulator import discovery


@pytest.fixture
def served(cli: Any, state_home: Path) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """`sbdlq emulator serve` on random ports, in a process of its own; yields it and its ports."""
    pytest.importorskip("proton")
    seed_orders(cli.store)
    with serve_process(cli, state_home, "--port", "0", "--http-port", "0") as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.fullmatch(r"listening on amqp://127\.0\.0\.1:(\d+) \(http 127\.0\.0\.1:(\d+)\)\n", line)
        assert found, line
        yield proc, int(found.group(1)), int(found.group(2))


def test_count_with_only_the_connection_string_reads_counts_from_the_admin_endpoint(
    cli: Any, served: tuple[subprocess.Popen[str], int, int]
) -> None:
    proc, amqp, http = served
    assert proc.stdout is not None
    # serve says nothing about SBDLQ_EMULATOR_HTTP_PORT: sbdlq finds the port by itself.
    assert proc.stdout.readline().startswith(f"connection string: Endpoint=sb://127.0.0.1:{amqp};")
    record = discovery.find("localhost", amqp)
    assert record is not None and record.http_port == http
    r = cli.bare("--connection-string", EMULATOR_CONN.format(port=amqp), "count", "orders", "-o", "json", "-v")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == [
        {"entity": "orders", "active": 1, "dead_letter": 1, "transfer_dead_letter": 0, "scheduled": 0}
    ]
    said = r.stderr.splitlines()
    source = f"`sbdlq emulator serve` (pid {proc.pid}) in {record.path}"
    assert f"sbdlq: admin endpoint: http://localhost:{http} (port from {source})" in said
    assert "sbdlq: counts: from the admin endpoint's runtime properties" in said
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert not record.path.exists()  # removed on a clean stop


def test_the_environment_variable_still_wins(cli: Any, served: tuple[subprocess.Popen[str], int, int]) -> None:
    _, amqp, http = served
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(http)}
    r = cli.bare("--connection-string", EMULATOR_CONN.format(port=amqp), "count", "orders", "-v", env=env)
    assert r.exit_code == 0, r.stderr
    assert f"sbdlq: admin endpoint: http://localhost:{http} (port from given (SBDLQ_EMULATOR_HTTP_PORT))" in (
        r.stderr.splitlines()
    )


def test_a_record_left_by_a_dead_server_is_ignored(state_home: Path) -> None:
    folder = discovery.discovery_dir()
    folder.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(done.stdout)
    (folder / "amqp-5999.json").write_text(
        json.dumps({"host": "127.0.0.1", "amqp_port": 5999, "http_port": 5301, "pid": dead_pid})
    )
    assert discovery.find("localhost", 5999) is None
    (folder / "amqp-5999.json").write_text(
        json.dumps({"host": "127.0.0.1", "amqp_port": 5999, "http_port": 5301, "pid": os.getpid()})
    )
    found = discovery.find("localhost", 5999)
    assert found is not None and found.http_port == 5301
    # Another host than the one bound, or a file that is not a record: no server known.
    assert discovery.find("10.1.2.3", 5999) is None
    (folder / "amqp-5999.json").write_text("not json")
    assert discovery.find("localhost", 5999) is None


def test_serve_names_the_variable_when_it_cannot_record_its_ports(
    cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import types

    cli("emulator", "init")
    fake = types.ModuleType("sbdlq.emulator.amqp.server")
    fake.serve = lambda store_path, **kwargs: kwargs["ready"](5999, 5301)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sbdlq.emulator.amqp.server", fake)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    r = cli("emulator", "serve", env={"XDG_STATE_HOME": str(blocked)})
    assert r.exit_code == 0
    assert r.stdout.splitlines()[-1] == "admin clients: export SBDLQ_EMULATOR_HTTP_PORT=5301"


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_string_naming_another_port_never_reads_the_default_http_port_of_another_server(
    cli: Any, served: tuple[subprocess.Popen[str], int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26 #3: nothing listens on the string's AMQP port; a server answers on the default HTTP port."""
    _, _, http = served
    # The served one stands in for a serve on the default HTTP port (5300 is not ours to bind in tests).
    monkeypatch.setattr("sbdlq.backends.servicebus.clients.ADMIN_EMULATOR_PORT", http)
    port = _closed_port()
    r = cli.bare("--connection-string", EMULATOR_CONN.format(port=port), "count", "orders", "-o", "json")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (
        f"sbdlq: no emulator recorded its HTTP (admin) port for localhost:{port} (is `sbdlq emulator serve` "
        f"running on localhost:{port}? For another emulator, set SBDLQ_EMULATOR_HTTP_PORT to its HTTP port)\n"
    )


def test_the_default_pair_is_refused_when_a_recorded_server_holds_its_http_port(cli: Any, state_home: Path) -> None:
    folder = discovery.discovery_dir()
    folder.mkdir(parents=True)
    record = {"host": "127.0.0.1", "amqp_port": 5999, "http_port": 5300, "pid": os.getpid()}
    (folder / "amqp-5999.json").write_text(json.dumps(record))
    conn = EMULATOR_CONN.replace(":{port}", "")  # AMQP's own port, 5672: Microsoft's emulator pairs it with 5300
    r = cli.bare("--connection-string", conn, "count", "orders")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr.startswith(
        "sbdlq: no emulator recorded its HTTP (admin) port for localhost:5672, and port 5300 belongs to the one "
        f"on AMQP port 5999 (pid {os.getpid()})"
    )
