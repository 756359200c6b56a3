"""`sbdlq emulator serve --tls` from the command line: what it prints, records and serves,
`sbdlq emulator ca`, and sbdlq's own client trusting the CA for an emulator connection string."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.serve_process import EMULATOR_CONN, seed_orders, serve_process

from sbdlq.emulator import discovery


@pytest.fixture
def served(cli: Any, state_home: Path) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """`sbdlq emulator serve --tls` on random ports, in a process of its own; yields it and what it printed."""
    pytest.importorskip("proton")
    seed_orders(cli.store)
    options = ["--tls", "--port", "0", "--tls-port", "0", "--http-port", "0"]
    with serve_process(cli, state_home, *options) as proc:
        assert proc.stdout is not None
        yield proc, [proc.stdout.readline() for _ in range(8)]


def test_serve_tls_prints_its_ports_and_how_to_trust_the_ca(cli: Any, served: Any) -> None:
    _, lines = served
    found = re.fullmatch(
        r"listening on amqp://127\.0\.0\.1:(\d+), amqps://127\.0\.0\.1:(\d+) \(https 127\.0\.0\.1:(\d+)\)\n", lines[0]
    )
    assert found, lines[0]
    amqp, amqps, _ = (int(g) for g in found.groups())
    ca = cli("emulator", "ca").stdout.strip()
    assert Path(ca).is_file()
    # One string: the AMQPS port answers HTTPS too; off 5671 the Python SDK's AMQP client needs the address.
    assert lines[2] == (
        f"TLS clients: Endpoint=sb://localhost:{amqps};SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE\n"
    )
    assert lines[3] == f"  Python SDK's AMQP client: also custom_endpoint_address='sb://localhost:{amqps}'\n"
    assert lines[4] == f"trust the emulator's CA {ca}:\n"
    # What adds to the trusted CAs first; the variables that replace them last, with a warning.
    assert lines[5:8] == [
        f"  Python SDK: connection_verify='{ca}' (ServiceBusClient, ServiceBusAdministrationClient)\n",
        f"  Node.js: export NODE_EXTRA_CA_CERTS={ca} (added to the CAs Node trusts)\n",
        f"  OpenSSL, requests: SSL_CERT_FILE={ca} REQUESTS_CA_BUNDLE={ca} replace the system's CAs: "
        "set them for one command, never in a shell that also reaches Azure\n",
    ]
    record = discovery.find("localhost", amqp)
    assert record is not None and record.https and record.ca == Path(ca)
    assert json.loads(record.path.read_text())["https"] is True


def test_sbdlq_reads_counts_over_https_trusting_the_ca_by_itself(cli: Any, served: Any) -> None:
    _, lines = served
    amqp, http = int(lines[0].split(":")[2].split(",")[0]), int(lines[0].rsplit(":", 1)[1].rstrip(")\n"))
    r = cli.bare("--connection-string", EMULATOR_CONN.format(port=amqp), "count", "orders", "-o", "json", "-v")
    assert r.exit_code == 0, r.stderr
    assert (json.loads(r.stdout)[0]["active"], json.loads(r.stdout)[0]["dead_letter"]) == (1, 1)
    said = r.stderr.splitlines()
    assert any(line.startswith(f"sbdlq: admin endpoint: https://localhost:{http} (port from") for line in said), said
    assert "sbdlq: counts: from the admin endpoint's runtime properties" in said


def test_cert_and_cert_key_go_together(cli: Any) -> None:
    pytest.importorskip("proton")
    cli("emulator", "init")
    r = cli("emulator", "serve", "--cert", "some.pem")
    assert r.exit_code == 2
    assert "--cert and --cert-key go together" in r.stderr


def test_an_unusable_certificate_is_refused_before_serving(cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("proton")
    cli("emulator", "init")
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    r = cli("emulator", "serve", "--cert", str(bad), "--cert-key", str(bad))
    assert r.exit_code == 2
    assert "cannot use the certificate" in r.stderr and "Traceback" not in r.stderr


def test_sbdlq_over_websockets_uses_wss_on_the_https_port(cli: Any, served: Any) -> None:
    pytest.importorskip("aiohttp")
    _, lines = served
    amqp = int(lines[0].split(":")[2].split(",")[0])
    conn = EMULATOR_CONN.format(port=amqp)
    r = cli.bare("--connection-string", conn, "--transport", "websockets", "peek", "orders", "--max", "5", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert [(m["body"], m["dead_letter_reason"]) for m in json.loads(r.stdout)] == [("x", "Poison")]


def test_sbdlq_state_dir_moves_the_ca_with_the_rest_of_the_state(cli: Any, tmp_path: Path) -> None:
    moved = tmp_path / "state"
    result = cli("emulator", "ca", env={"SBDLQ_STATE_DIR": str(moved)})
    assert result.exit_code == 0, result.stderr
    ca = Path(result.stdout.strip())
    assert ca.parent == moved / "tls" and ca.is_file()
    assert (moved / "tls").stat().st_mode & 0o777 == 0o700
