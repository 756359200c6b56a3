"""`emulator serve` takes its key from --key-file or SBDLQ_EMULATOR_KEY (not `ps`), and its limits."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def served(cli: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """serve() replaced by a recorder: what the command would start the listener with."""
    cli("emulator", "init")
    calls: list[dict[str, Any]] = []

    def fake_serve(store_path: str, **kwargs: Any) -> None:
        calls.append(kwargs)

    fake = types.ModuleType("sbdlq.emulator.amqp.server")
    fake.serve = fake_serve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sbdlq.emulator.amqp.server", fake)
    return calls


def test_key_file(cli: Any, served: list[dict[str, Any]], tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("from-a-file\n")
    args = ("emulator", "serve", "--host", "0.0.0.0", "--key-file", str(key_file), "--max-connections", "7")
    result = cli(*args, "--auth-timeout", "2.5")
    assert result.exit_code == 0 and "from-a-file" not in result.stdout + result.stderr
    (call,) = served
    assert call["key"] == "from-a-file"
    assert (call["limits"].max_connections, call["limits"].auth_timeout_s) == (7, 2.5)


def test_key_from_the_environment(cli: Any, served: list[dict[str, Any]]) -> None:
    assert cli("emulator", "serve", "--host", "0.0.0.0", env={"SBDLQ_EMULATOR_KEY": "env-key"}).exit_code == 0
    assert served[0]["key"] == "env-key"


def test_key_file_problems_are_one_line_without_the_key(cli: Any, served: list[dict[str, Any]], tmp_path: Path) -> None:
    missing = cli("emulator", "serve", "--key-file", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1 and "cannot read --key-file" in missing.stderr
    key_file = tmp_path / "key"
    key_file.write_text("secret-one\n")
    both = cli("emulator", "serve", "--key-file", str(key_file), env={"SBDLQ_EMULATOR_KEY": "secret-two"})
    assert both.exit_code == 2 and "secret" not in both.stderr.replace("--key-file", "")
    key_file.write_text("secret-one\nsecret-two\n")
    two_lines = cli("emulator", "serve", "--key-file", str(key_file))
    assert two_lines.exit_code == 2 and "secret-" not in two_lines.stderr
    assert served == []


def test_help_recommends_the_key_file(cli: Any) -> None:
    code, out, _ = cli.bare("emulator", "serve", "--help")
    assert code == 0 and "--key-file" in out and "SBDLQ_EMULATOR_KEY" in out
