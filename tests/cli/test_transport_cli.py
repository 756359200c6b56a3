"""--transport and --proxy at the CLI: bad values are one line (exit 2), and a proxy password never shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize("where", ["before", "after"])
def test_bad_transport_is_exit_2(cli: Any, where: str) -> None:
    opts = ("--namespace", "contoso", "--transport", "tcp")
    args = (*opts, "count", "orders") if where == "before" else ("count", "orders", *opts)
    assert cli.bare(*args) == (2, "", "sbdlq: --transport must be amqp or websockets, not 'tcp'\n")


def test_bad_proxy_url_masks_its_credentials(cli: Any) -> None:
    code, out, err = cli.bare("--namespace", "contoso", "--proxy", "ftp://op:pr0xy-pass@proxy:21", "count", "x")
    assert (code, out) == (2, "")
    assert err == "sbdlq: --proxy: invalid proxy URL 'ftp://***@proxy:21' (use http://[user:password@]host:port)\n"


def test_bad_transport_from_the_environment_names_it(cli: Any) -> None:
    env = {"SBDLQ_TRANSPORT": "quic"}
    assert cli.bare("--namespace", "contoso", "count", "x", env=env) == (
        2,
        "",
        "sbdlq: SBDLQ_TRANSPORT must be amqp or websockets, not 'quic'\n",
    )


def test_profile_transport_and_proxy_show_masked(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "default_profile: corp\nprofiles:\n  corp:\n    namespace: contoso\n"
        "    transport: websockets\n    proxy: http://op:pr0xy-pass@proxy.corp:3128\n"
    )
    code, out, err = cli.bare("config", "show", "-o", "json", env={"SBDLQ_CONFIG": str(config)})
    assert (code, err) == (0, "")
    rows = {r["setting"]: (r["value"], r["source"]) for r in __import__("json").loads(out)}
    assert rows["transport"] == ("websockets", "profile corp")
    assert rows["proxy"] == ("http://***@proxy.corp:3128", "profile corp")
    assert "pr0xy-pass" not in out


def test_proxy_option_shows_masked_in_config_show(cli: Any) -> None:
    code, out, err = cli.bare("config", "show", "--proxy", "http://op:pr0xy-pass@proxy.corp:3128")
    assert (code, err) == (0, "")
    assert ["proxy", "http://***@proxy.corp:3128", "option", "--proxy"] in [line.split() for line in out.splitlines()]
    assert "pr0xy-pass" not in out


def test_bad_profile_transport_names_the_field(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("profiles:\n  corp:\n    namespace: contoso\n    transport: udp\n")
    code, out, err = cli.bare("--profile", "corp", "count", "x", env={"SBDLQ_CONFIG": str(config)})
    assert (code, out) == (2, "")
    assert err == f"sbdlq: config file {config}: profiles.corp.transport must be amqp or websockets, not 'udp'\n"


@pytest.mark.parametrize(("endpoint", "port"), [("sb://127.0.0.1:5999", 5999), ("sb://127.0.0.1", 5672)])
def test_verbose_names_the_port_the_target_uses(cli: Any, endpoint: str, port: int) -> None:
    """Not 5671 for an emulator's endpoint (only loopback is dialled: nothing listens there)."""
    conn = f"Endpoint={endpoint};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"
    result = cli.invoke("-v", "--connection-string", conn, "--timeout", "0.2s", "count", "q")
    assert f"sbdlq: network: AMQP ({port})" in result.stderr
