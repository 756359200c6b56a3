"""`emulator serve --config Config.json` loads a Microsoft emulator configuration at start."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.serve_process import serve_process

from sbdlq.emulator.engine import Engine

CONFIG = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "sbemulatorns",
                "Queues": [{"Name": "orders", "Properties": {"MaxDeliveryCount": 3}}],
                "Topics": [
                    {"Name": "events", "Properties": {}, "Subscriptions": [{"Name": "audit", "Properties": {}}]}
                ],
            }
        ],
        "Logging": {"Type": "File"},
    }
}


def test_serve_applies_the_config_before_listening_on_a_new_store(cli: Any, state_home: Path, tmp_path: Path) -> None:
    pytest.importorskip("proton")
    config = tmp_path / "Config.json"
    config.write_text(json.dumps(CONFIG))
    assert not cli.store.exists()
    with serve_process(cli, state_home, "--port", "0", "--http-port", "0", "--config", str(config)) as proc:
        assert proc.stdout is not None
        first, second = proc.stdout.readline(), proc.stdout.readline()
        assert first == f"applied {config} (namespace sbemulatorns): 1 queue, 1 topic, 1 subscription, 1 rule\n"
        assert re.fullmatch(r"listening on amqp://127\.0\.0\.1:\d+ \(http 127\.0\.0\.1:\d+\)\n", second), second
        with Engine(cli.store) as engine:
            assert sorted(e.path for e in engine.list_entities()) == ["events", "events/Subscriptions/audit", "orders"]
            assert engine.get_entity("orders").max_delivery_count == 3


def test_a_bad_config_is_refused_before_anything_listens_or_is_created(cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("proton")
    config = tmp_path / "Config.json"
    config.write_text('{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Properties": {}}]}]}}')
    r = cli.bare("--emulator", str(cli.store), "emulator", "serve", "--port", "0", "--config", str(config))
    assert (r.exit_code, r.stdout) == (2, "")
    assert len(r.stderr.splitlines()) == 1 and "Name" in r.stderr
    assert not cli.store.exists()
