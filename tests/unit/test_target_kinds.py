"""Every place that reads a target's kind knows the three kinds and refuses any other by name
(`UnknownTargetKind`), never guessing it is a connection string or a namespace."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sbdlq.backends import open_backend
from sbdlq.errors import BadInput, ExitStatus, UnknownTargetKind
from sbdlq.profiles import Setting, Source, Target, resolve_target

STRING = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0"


def test_the_three_kinds_resolve_describe_and_open_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SBDLQ_CONFIG", str(tmp_path / "no-config.yaml"))
    store = tmp_path / "store.db"

    def resolved(key: str, value: str, source: Source) -> Target:
        return resolve_target(options={key: Setting(value, source)})

    emulator = resolved("emulator", str(store), Source.OPTION)
    assert emulator.describe() == f"emulator store {store} (from --emulator)"
    namespace = resolved("namespace", "prod", Source.ENV)
    assert (
        namespace.describe()
        == "namespace prod.servicebus.windows.net with DefaultAzureCredential (from SBDLQ_NAMESPACE)"
    )
    described = resolved("connection_string", STRING, Source.OPTION).describe()
    assert described == "ns.servicebus.windows.net with a connection string (from --connection-string)"
    assert "c2VjcmV0" not in described
    assert type(open_backend(emulator, create=True)).__name__ == "EmulatorBackend"


@pytest.mark.parametrize("kind", ["pigeon", "connection-string", ""])
def test_an_unknown_kind_is_refused_by_name_everywhere(kind: str) -> None:
    target = Target(kind, STRING, Source.OPTION)
    with pytest.raises(UnknownTargetKind, match="unknown target kind"):
        target.describe()  # was: parsed as a connection string
    already = "azure.servicebus" in sys.modules
    with pytest.raises(UnknownTargetKind, match="unknown target kind"):
        open_backend(target)  # was: opened as a namespace
    assert already or "azure.servicebus" not in sys.modules  # refused before the SDK is loaded


def test_an_unknown_kind_is_a_usage_error() -> None:
    assert issubclass(UnknownTargetKind, BadInput)
    assert UnknownTargetKind("unknown target kind 'x'").exit_status is ExitStatus.USAGE
