"""Bad input: one clear line on stderr, the documented exit status, no traceback, nothing changed.

One row per mistake an operator or a script makes. Every row runs against the same seeded
emulator store, and the store must be exactly as before afterwards.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from pathlib import Path

import pytest
from support import Cli

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

SECRET = "S3cr3tKeyValueNobodyMaySee0123456789abcdefXYZ="
CONN_OK_SHAPE = f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={SECRET}"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    eng = Engine(path)
    eng.create_queue("orders")
    eng.create_queue("retry")
    eng.create_queue("dedup", requires_duplicate_detection=True)
    eng.create_topic("events")
    eng.create_subscription("events", "audit")
    eng.send("orders", [OutboundMessage(body=b'{"n": %d}' % i, message_id=f"m-{i}") for i in range(6)])
    address = parse_address("orders")
    got = eng.receive(address, 4)
    eng.dead_letter(address, [m.lock_token for m in got if m.lock_token], "Bad", "broken")
    eng.close()
    return path


def snapshot(path: Path) -> list[tuple[str, int, int, int, int, list[str]]]:
    eng = Engine(path)
    out = []
    for info in eng.list_entities():
        if info.kind == "topic":
            continue
        c = eng.counts(info.path)
        ids = [m.message_id or "" for m in eng.peek(parse_address(info.path + "/$DeadLetterQueue"), 0, 1000)]
        ids += [m.message_id or "" for m in eng.peek(parse_address(info.path), 0, 1000)]
        out.append((info.path, c.active, c.dead_letter, c.transfer_dead_letter, c.scheduled, ids))
    eng.close()
    return out


def _config_files(tmp: Path) -> dict[str, Path]:
    files = {
        "yaml_invalid": "profiles: [unclosed\n",
        "yaml_wrong_type": "profiles:\n  - prod\n  - dev\n",
        "yaml_unknown_key": "profiles:\n  prod:\n    colour: blue\n",
        "json_invalid": '{"UserConfig": {"Namespaces": [ }',
        "json_wrong_type": (
            '{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "q", "Properties": '
            '{"MaxDeliveryCount": "three"}}], "Topics": []}], "Logging": {"Type": "File"}}}'
        ),
        "json_bad_duration": (
            '{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "q", "Properties": '
            '{"LockDuration": "PT1X"}}], "Topics": []}], "Logging": {"Type": "File"}}}'
        ),
    }
    out = {}
    for name, text in files.items():
        p = tmp / f"{name}.{'yaml' if name.startswith('yaml') else 'json'}"
        p.write_text(text)
        out[name] = p
    (tmp / "adir").mkdir()
    out["adir"] = tmp / "adir"
    out["notadb"] = tmp / "notadb.db"
    out["notadb"].write_text("this is not sqlite, just text " * 100)
    out["emptystore"] = tmp / "empty.db"
    out["emptystore"].touch()
    out["corruptstore"] = _corrupt_store(tmp / "corrupt.db")
    return out


def _corrupt_store(path: Path) -> Path:
    """A real store with its middle pages overwritten (a torn copy, a disk fault)."""
    eng = Engine(path)
    eng.create_queue("orders")
    eng.send(parse_address("orders"), [OutboundMessage(body=b"x" * 200, message_id=f"m{i}") for i in range(3000)])
    eng.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    middle = len(data) // 4096 // 2 * 4096
    data[middle : middle + 4 * 4096] = b"\xff" * (4 * 4096)
    path.write_bytes(bytes(data))
    return path


# (id, global args, command args, env, expected exit status, a phrase the line must contain)
ROWS: list[tuple[str, list[str], list[str], dict[str, str], int, str]] = [
    (
        "conn-missing-key-name",
        ["--connection-string", f"Endpoint=sb://x.servicebus.windows.net/;SharedAccessKey={SECRET}"],
        ["count", "orders"],
        {},
        2,
        "SharedAccessKeyName",
    ),
    (
        "conn-missing-endpoint",
        ["--connection-string", f"SharedAccessKeyName=Root;SharedAccessKey={SECRET}"],
        ["count", "orders"],
        {},
        2,
        "Endpoint",
    ),
    (
        "proxy-unclosed-ipv6",
        ["--proxy", "http://[::1", "--namespace", "x.servicebus.windows.net"],
        ["count", "orders"],
        {},
        2,
        "invalid proxy URL",
    ),
    ("conn-garbage", ["--connection-string", f"garbage{SECRET}"], ["count", "orders"], {}, 2, "connection string"),
    (
        "conn-missing-key",
        ["--connection-string", "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=Root"],
        ["count", "orders"],
        {},
        2,
        "SharedAccessKey",
    ),
    (
        "conn-env-garbage",
        [],
        ["count", "orders"],
        {"SBDLQ_CONNECTION_STRING": f"Endpoint=nope;SharedAccessKey={SECRET}", "SBDLQ_EMULATOR": ""},
        2,
        "connection string",
    ),
    ("unknown-entity", [], ["peek", "nosuch"], {}, 4, "nosuch"),
    ("misspelled-entity", [], ["count", "ordrs"], {}, 4, "ordrs"),
    ("misspelled-subscription", [], ["peek", "events/Subscriptions/audt"], {}, 4, "audt"),
    ("invalid-name", [], ["peek", "bad name!"], {}, 2, "invalid"),
    ("invalid-name-slashes", [], ["peek", "a//b"], {}, 2, "invalid"),
    ("empty-subscription", [], ["peek", "events/Subscriptions/"], {}, 2, "subscription"),
    ("topic-has-no-dlq", [], ["peek", "events"], {}, 2, "topic"),
    ("bad-timeout", ["--timeout", "5x"], ["count", "orders"], {}, 2, "--timeout"),
    ("bad-older-than", [], ["purge", "orders", "--older-than", "3 fortnights", "--yes"], {}, 2, "--older-than"),
    ("bad-date", [], ["peek", "orders", "--enqueued-before", "2024-13-45"], {}, 2, "--enqueued-before"),
    ("bad-date-after", [], ["peek", "orders", "--enqueued-after", "yesterday"], {}, 2, "--enqueued-after"),
    ("empty-range", [], ["peek", "orders", "--sequence", "9-3"], {}, 2, "--sequence"),
    ("garbage-range", [], ["peek", "orders", "--sequence", "abc"], {}, 2, "--sequence"),
    ("bad-regex", [], ["peek", "orders", "--body-regex", "("], {}, 2, "--body-regex"),
    ("bad-where-syntax", [], ["peek", "orders", "--where", "sys.Label = "], {}, 2, "--where"),
    ("bad-where-sys-property", [], ["peek", "orders", "--where", "sys.Nope = 1"], {}, 2, "--where"),
    ("bad-output", [], ["count", "orders", "-o", "xml"], {}, 2, "xml"),
    ("bad-query", [], ["count", "orders", "-o", "json", "--query", "[?"], {}, 2, "--query"),
    ("bad-by", [], ["inspect-reason", "orders", "--by", "colour"], {}, 2, "--by"),
    ("bad-property", [], ["peek", "orders", "--property", "noequals"], {}, 2, "--property"),
    ("unknown-profile", ["--profile", "nope"], ["count", "orders"], {"SBDLQ_EMULATOR": ""}, 2, "nope"),
    ("config-is-directory", [], ["count", "orders"], {"SBDLQ_CONFIG": "{adir}", "SBDLQ_EMULATOR": ""}, 2, "config"),
    (
        "config-invalid-yaml",
        [],
        ["count", "orders"],
        {"SBDLQ_CONFIG": "{yaml_invalid}", "SBDLQ_EMULATOR": ""},
        2,
        "YAML",
    ),
    (
        "config-wrong-type",
        [],
        ["count", "orders"],
        {"SBDLQ_CONFIG": "{yaml_wrong_type}", "SBDLQ_EMULATOR": ""},
        2,
        "profiles",
    ),
    (
        "config-unknown-key",
        [],
        ["count", "orders"],
        {"SBDLQ_CONFIG": "{yaml_unknown_key}", "SBDLQ_EMULATOR": ""},
        2,
        "colour",
    ),
    ("configjson-invalid", [], ["emulator", "init", "--config", "{json_invalid}"], {}, 2, "json_invalid"),
    ("configjson-wrong-type", [], ["emulator", "init", "--config", "{json_wrong_type}"], {}, 2, "MaxDeliveryCount"),
    ("configjson-bad-duration", [], ["emulator", "init", "--config", "{json_bad_duration}"], {}, 2, "LockDuration"),
    ("configjson-missing", [], ["emulator", "init", "--config", "/nonexistent/Config.json"], {}, 2, "Config.json"),
    ("export-dir-missing", [], ["purge", "orders", "--yes", "--export", "/nonexistent/dir/x.jsonl"], {}, 2, "--export"),
    ("export-is-directory", [], ["purge", "orders", "--yes", "--export", "{adir}"], {}, 2, "--export"),
    ("purge-needs-yes", [], ["purge", "orders"], {}, 2, "--yes"),
    (
        "conflicting-targets",
        ["--connection-string", CONN_OK_SHAPE, "--namespace", "contoso"],
        ["count", "orders"],
        {},
        2,
        "conflicting",
    ),
    (
        "resubmit-to-subscription",
        [],
        ["resubmit", "orders", "--to", "events/Subscriptions/audit"],
        {},
        2,
        "subscription",
    ),
    ("resubmit-to-dlq", [], ["resubmit", "orders", "--to", "retry/$DeadLetterQueue"], {}, 2, "dead-letter"),
    ("resubmit-unknown-target", [], ["resubmit", "orders", "--to", "nosuch"], {}, 4, "nosuch"),
    ("resubmit-into-duplicate-detection", [], ["resubmit", "orders", "--to", "dedup"], {}, 2, "--new-message-id"),
    ("zero-concurrency", [], ["resubmit", "orders", "--concurrency", "0"], {}, 2, "concurrency"),
    ("zero-max", [], ["peek", "orders", "--max", "0"], {}, 2, "--max"),
    ("store-not-a-database", ["--emulator", "{notadb}"], ["count", "orders"], {}, 2, "not an sbdlq emulator store"),
    ("store-zero-length", ["--emulator", "{emptystore}"], ["count", "orders"], {}, 2, "empty (0 bytes)"),
    ("store-corrupt", ["--emulator", "{corruptstore}"], ["count", "orders"], {}, 1, "is corrupt"),
    ("store-missing", ["--emulator", "/nonexistent/store.db"], ["count", "orders"], {}, 2, "no emulator store"),
    ("unknown-command", [], ["resubmitt", "orders"], {}, 2, "resubmitt"),
    ("enqueued-after-overflow", [], ["peek", "orders", "--enqueued-after", "99999999999d"], {}, 2, "--enqueued-after"),
    (
        "enqueued-before-overflow",
        [],
        ["peek", "orders", "--enqueued-before", "1" + "0" * 400 + "s"],
        {},
        2,
        "--enqueued-before",
    ),
    ("older-than-overflow", [], ["purge", "orders", "--older-than", "1000000000000d", "--yes"], {}, 2, "--older-than"),
    (
        "from-sequence-overflow",
        [],
        ["peek", "orders", "--from-sequence", "99999999999999999999"],
        {},
        2,
        "--from-sequence",
    ),
    ("sequence-overflow", [], ["peek", "orders", "--sequence", "99999999999999999999"], {}, 2, "--sequence"),
    (
        "sequence-range-overflow",
        [],
        ["purge", "orders", "--sequence", "1-99999999999999999999", "--yes"],
        {},
        2,
        "--sequence",
    ),
    ("rate-nan", [], ["resubmit", "orders", "--to", "retry", "--rate", "nan"], {}, 2, "--rate"),
    ("rate-inf", [], ["resubmit", "orders", "--to", "retry", "--rate", "inf"], {}, 2, "--rate"),
    ("rate-negative", [], ["resubmit", "orders", "--to", "retry", "--rate", "-5"], {}, 2, "--rate"),
    ("rate-zero", [], ["resubmit", "orders", "--to", "retry", "--rate", "0"], {}, 2, "--rate"),
]


@pytest.mark.parametrize(("row_id", "globals_", "args", "env", "status", "phrase"), ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_row(
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    row_id: str,
    globals_: list[str],
    args: list[str],
    env: dict[str, str],
    status: int,
    phrase: str,
) -> None:
    files = _config_files(tmp_path)

    def fill(text: str) -> str:
        for name, path in files.items():
            text = text.replace("{" + name + "}", str(path))
        return text

    # "" in the table means: the variable is unset.
    variables = {"SBDLQ_EMULATOR": str(store), **{k: fill(v) if v else None for k, v in env.items()}}
    before = snapshot(store)
    result = Cli(store, tmp_path).invoke(*[fill(a) for a in globals_], *[fill(a) for a in args], env=variables)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == status, f"{row_id}: exit {result.exit_code}, stderr={result.stderr!r}"
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert SECRET not in result.stderr + result.stdout
    assert len(lines) == 1, f"{row_id}: expected one line on stderr, got {lines!r}"
    assert phrase.lower() in lines[0].lower(), f"{row_id}: {lines[0]!r} lacks {phrase!r}"
    assert result.stdout == ""
    assert snapshot(store) == before


def test_full_disk_while_exporting_deletes_nothing_unexported(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC on the export file: exit 1 with one line; every message still in the DLQ or the file."""
    real_pwrite = os.pwrite
    calls = {"n": 0}

    def full_disk(fd: int, data: bytes | memoryview, offset: int) -> int:
        if len(data) == 1:  # a record's delete mark, set in place: takes no new space
            return real_pwrite(fd, data, offset)
        calls["n"] += 1
        if calls["n"] >= 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr("sbdlq.operations.export.os.pwrite", full_disk)
    export = tmp_path / "out.jsonl"
    cli = Cli(store, tmp_path)
    result = cli.invoke(
        "purge", "orders", "--yes", "--batch-size", "1", "--export", str(export), env={"SBDLQ_EMULATOR": str(store)}
    )
    assert result.exit_code == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "No space left on device" in result.stderr
    exported = [json.loads(line)["message_id"] for line in export.read_text().splitlines()]
    eng = Engine(store)
    left = [m.message_id for m in eng.peek(parse_address("orders/$DeadLetterQueue"), 0, 100)]
    eng.close()
    assert sorted(exported + left) == ["m-0", "m-1", "m-2", "m-3"]
    assert len(exported) == 1


@pytest.mark.parametrize(
    "args",
    [
        [b"emulator", b"send", b"orders", b"--body", b"caf\xe9"],
        [b"resubmit", b"orders", b"--set-subject", b"\xff\xfe", b"--dry-run"],
        [b"peek", b"orders", b"--where", b"tenant = '\xe9'"],
    ],
    ids=["body", "edit option", "selection"],
)
def test_an_argument_that_is_not_utf8_is_one_line_and_exit_2(store: Path, tmp_path: Path, args: list[bytes]) -> None:
    """Bytes that are not UTF-8 (Latin-1 typed in a terminal) reach Python as lone surrogates,
    which failed deep inside a command as "unexpected error", exit 1."""
    import subprocess
    import sys

    env = {**os.environ, "SBDLQ_EMULATOR": str(store), "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable.encode(), b"-m", b"sbdlq", *args], env=env, capture_output=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode("utf-8", "replace").splitlines()
    assert len(lines) == 1 and lines[0].startswith("sbdlq: argument ") and "is not valid UTF-8 text" in lines[0]
