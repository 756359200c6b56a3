"""`emulator serve --quotas microsoft` as a user starts it: 10 connections, a Config.json past them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import raw_amqp
from support.serve_process import serve_process


def test_serve_quotas_microsoft_takes_ten_connections(cli: Any, state_home: Path) -> None:
    pytest.importorskip("proton")
    cli("emulator", "init")
    with serve_process(cli, state_home, "--port", "0", "--http-port", "0", "--quotas", "microsoft") as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = int(re.search(r"amqp://127\.0\.0\.1:(\d+)", line).group(1))  # type: ignore[union-attr]
        held = [raw_amqp.connect(port) for _ in range(10)]
        try:
            with raw_amqp.connect(port) as extra:
                extra.sendall(raw_amqp.sasl_anonymous() + raw_amqp.frame(raw_amqp.OPEN, ["over-the-cap"]))
                answer = raw_amqp.wait_for(extra, b"retry.")
            assert b"The maximum number of concurrent connections (10) has been reached" in answer
        finally:
            for sock in held:
                sock.close()


def test_serve_quotas_microsoft_refuses_a_config_past_them(cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("proton")
    config = tmp_path / "Config.json"
    queues = [{"Name": f"q{i}", "Properties": {}} for i in range(51)]
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": queues}]}}))
    r = cli.bare(
        "--emulator", str(cli.store), "emulator", "serve", "--port", "0", "--quotas", "microsoft", "--config",
        str(config),
    )  # fmt: skip
    assert r.exit_code != 0 and r.stdout == ""
    assert "The maximum number of queues and topics in the namespace (50)" in r.stderr


def test_an_unknown_quota_set_is_one_line(cli: Any) -> None:
    r = cli.bare("--emulator", str(cli.store), "emulator", "serve", "--quotas", "azure")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr.splitlines()[0] == "sbdlq: unknown --quotas 'azure': generous or microsoft"
