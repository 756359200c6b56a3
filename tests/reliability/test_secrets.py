"""No secret ever leaves the process: errors, --verbose, --debug, logs and tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KEY = "Zm9vYmFyU2VjcmV0S2V5VGhhdE11c3ROZXZlckxlYWs="
SAS = "SharedAccessSignature sr=sb%3a%2f%2fx&sig=AbCdSiGnAtUrEvAlUe123%3d&se=9999999999&skn=Root"


def _sbdlq(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SBDLQ_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sbdlq", *args],
        capture_output=True,
        text=True,
        env=full_env,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CONNS = {
    "sas-key-emulator": f"Endpoint=sb://127.0.0.1:{{port}};SharedAccessKeyName=Root;SharedAccessKey={KEY};UseDevelopmentEmulator=true;",
    "sas-key": f"Endpoint=sb://127.0.0.1:{{port}}/;SharedAccessKeyName=Root;SharedAccessKey={KEY}",
    "sas-token": f"Endpoint=sb://127.0.0.1:{{port}}/;SharedAccessSignature={SAS}",
}


@pytest.mark.parametrize("kind", sorted(CONNS))
@pytest.mark.parametrize("flags", [[], ["--verbose"], ["--debug"], ["--verbose", "--debug"]])
def test_unreachable_broker_never_prints_the_key(kind: str, flags: list[str]) -> None:
    port = str(_closed_port())
    conn = CONNS[kind].replace("{port}", port)
    # The emulator's HTTP port given (closed too): the run reaches the broker and fails there.
    env = {"SBDLQ_CONNECTION_STRING": conn, "SBDLQ_EMULATOR_HTTP_PORT": port}
    result = _sbdlq([*flags, "--timeout", "3s", "count", "orders"], env=env)
    out = result.stdout + result.stderr
    assert result.returncode == 6, out
    assert KEY not in out
    assert "AbCdSiGnAtUrEvAlUe123" not in out
    assert "127.0.0.1" in out  # the line names the host
    if "--debug" not in flags:
        assert "Traceback" not in out
    if not flags:
        assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr


def test_bad_connection_string_error_never_echoes_it() -> None:
    result = _sbdlq(["--connection-string", f"Endpoint=sb://x/;SharedAccessKey={KEY}", "count", "orders"])
    assert result.returncode == 2
    assert KEY not in result.stdout + result.stderr


def test_world_readable_config_with_secret_warns(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    port = _closed_port()
    cfg.write_text(
        "default_profile: prod\nprofiles:\n  prod:\n"
        f"    connection_string: 'Endpoint=sb://127.0.0.1:{port}/;SharedAccessKeyName=Root;SharedAccessKey={KEY}'\n"
    )
    cfg.chmod(0o644)
    result = _sbdlq(["--timeout", "2s", "count", "orders"], env={"SBDLQ_CONFIG": str(cfg)})
    assert "readable by group or others" in result.stderr
    assert KEY not in result.stdout + result.stderr
    cfg.chmod(0o600)
    result = _sbdlq(["--timeout", "2s", "count", "orders"], env={"SBDLQ_CONFIG": str(cfg)})
    assert "readable by group or others" not in result.stderr


def test_config_show_masks_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "profiles:\n  prod:\n"
        f"    connection_string: 'Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={KEY}'\n"
    )
    cfg.chmod(0o600)
    result = _sbdlq(["config", "show", "prod"], env={"SBDLQ_CONFIG": str(cfg)})
    assert result.returncode == 0, result.stderr
    assert KEY not in result.stdout + result.stderr
    assert "contoso.servicebus.windows.net" in result.stdout


def test_serve_refuses_public_bind_without_key(tmp_path: Path) -> None:
    result = _sbdlq(["--emulator", str(tmp_path / "e.db"), "emulator", "serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.returncode == 2
    assert "key" in result.stderr.lower()


@pytest.mark.parametrize(
    "args",
    [
        ["{conn}", "count"],  # the option name forgotten: click takes it for a command
        ["peek", "orders", "{conn}"],  # an extra argument
        ["peek", "orders", "--max", "{conn}"],  # an invalid value
    ],
)
def test_usage_errors_never_echo_a_misplaced_connection_string(args: list[str]) -> None:
    conn = f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={KEY}"
    result = _sbdlq([a.replace("{conn}", conn) for a in args])
    assert result.returncode == 2
    assert KEY not in result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1
