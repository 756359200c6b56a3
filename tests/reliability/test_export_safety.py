"""`purge --export` never cuts data it did not write (issue 12 items 2 and 3).

The export file may be someone else's: another run appending to it right now, a token file
typed by mistake, a symlink to a file elsewhere. Each case checks the exit status, the one
line on stderr, that the file is byte for byte as before, and that the DLQ lost nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import dead_letter_all, stored_ids
from support.process import GATE, GATED, gate_env, start_sbdlq, wait_for_line

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage
from tests.conftest import Cli

N = 6
GUARD_S = 60  # a hang guard for each wait on a process, not a speed bound
RECORD = b'{"sequence_number": 1, "message_id": "old-1", "body": "x"}\n'


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    engine.create_queue("orders")
    orders = [OutboundMessage(body=b"order %d" % i, message_id=f"m-{i}") for i in range(N)]
    dead_letter_all(engine, "orders", orders, "Bad", "broken")
    return engine


def _refused(cli: Cli, target: Path, status: int, phrase: str, *extra: str) -> None:
    before = target.read_bytes() if target.exists() else None
    code, out, err = cli("purge", "orders", "--yes", "--export", str(target), *extra)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == status, err
    assert len(lines) == 1 and phrase in lines[0], lines
    assert out == ""
    assert (target.read_bytes() if target.exists() else None) == before
    assert len(stored_ids(cli.store, "orders/$DeadLetterQueue")) == N


def test_unterminated_token_file_is_refused_not_cut(seeded: Engine, cli: Cli, tmp_path: Path) -> None:
    token = tmp_path / "token.txt"
    token.write_bytes(b"ghp_very-secret-token-with-no-newline")
    _refused(cli, token, 2, "not an sbdlq JSONL export")


def test_other_jsonl_file_is_refused(seeded: Engine, cli: Cli, tmp_path: Path) -> None:
    other = tmp_path / "events.jsonl"
    other.write_bytes(b'{"event": "a"}\n{"event": "b"}\n')
    _refused(cli, other, 2, "not an sbdlq JSONL export")
    _refused(cli, other, 2, "not an sbdlq JSONL export", "--dry-run")


def test_export_with_a_foreign_tail_is_refused(seeded: Engine, cli: Cli, tmp_path: Path) -> None:
    """Whole records, then a last line someone else appended: not ours to cut."""
    path = tmp_path / "export.jsonl"
    path.write_bytes(RECORD + b"a note typed by hand")
    _refused(cli, path, 2, "partial line that is not an sbdlq export record")


def test_symlink_is_refused_unless_asked(seeded: Engine, cli: Cli, tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"line one\nunterminated")
    link = tmp_path / "export.jsonl"
    link.symlink_to(precious)
    _refused(cli, link, 2, "symlink")
    # Following it is allowed on request, and still never cuts a file that isn't an export.
    _refused(cli, link, 2, "not an sbdlq JSONL export", "--export-follow-symlinks")
    exports = tmp_path / "real-export.jsonl"
    exports.write_bytes(RECORD)
    link.unlink()
    link.symlink_to(exports)
    code, _, err = cli("purge", "orders", "--yes", "--export", str(link), "--export-follow-symlinks")
    assert code == 0, err
    assert exports.read_bytes().startswith(RECORD)
    assert len(exports.read_bytes().splitlines()) == N + 1


def test_torn_export_record_is_repaired(seeded: Engine, cli: Cli, tmp_path: Path) -> None:
    """What a kill -9 leaves (a record cut mid-line) is dropped: its message is still in the DLQ."""
    path = tmp_path / "export.jsonl"
    path.write_bytes(RECORD + b'{"sequence_number": 2, "message_id": "m-0", "bo')
    code, _, err = cli("purge", "orders", "--yes", "--export", str(path))
    assert code == 0, err
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines[0] == RECORD
    assert sorted(json.loads(line)["message_id"] for line in lines[1:]) == [f"m-{i}" for i in range(N)]


def test_file_locked_by_another_run_is_refused(seeded: Engine, cli: Cli, tmp_path: Path) -> None:
    """While another run holds the file (its last line still being written), a second run refuses."""
    path = tmp_path / "export.jsonl"
    path.write_bytes(RECORD + b'{"sequence_number": 2, "message_id": "in-flight", "bo')
    with open(path, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        _refused(cli, path, 1, "is being written by another sbdlq run")


def test_two_runs_at_once_lose_nothing(seeded: Engine, store: Path, tmp_path: Path) -> None:
    """Two real processes onto one file: the second refuses with exit 1; every message is kept."""
    extra = [OutboundMessage(body=b"more %d" % i, message_id=f"x-{i}") for i in range(200)]
    seeded.send("orders", extra)
    address = parse_address("orders")
    got = seeded.receive(address, 200)
    seeded.dead_letter(address, [m.lock_token for m in got if m.lock_token], "Bad", "broken")
    path = tmp_path / "export.jsonl"
    release = tmp_path / "release"
    env = {
        **os.environ,
        "SBDLQ_EMULATOR": str(store),
        "SBDLQ_CONFIG": str(tmp_path / "none.yaml"),
        # Latency makes each call a round trip, where the gate holds the first run once it has
        # written a line, until the second run is done: they overlap on any machine.
        "SBDLQ_EMULATOR_LATENCY": "20ms",
    }
    args = ["purge", "orders", "--yes", "--batch-size", "5", "--export", str(path)]
    first = start_sbdlq(args, {**env, **gate_env(path, 1, until=release)}, script=GATED)
    assert first.stderr is not None
    wait_for_line(first.stderr, GUARD_S, GATE + "\n")  # the first run is writing
    argv = [sys.executable, "-m", "sbdlq", *args]
    second = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=GUARD_S)
    overlapped = first.poll() is None
    release.write_text("go")
    _, first_err = first.communicate(timeout=GUARD_S)
    assert overlapped, "the first run ended before the second ran: nothing was tested"
    assert first.returncode == 0, first_err
    assert second.returncode == 1, second.stderr
    assert "is being written by another sbdlq run" in second.stderr
    exported = [json.loads(line)["message_id"] for line in path.read_bytes().splitlines()]
    assert path.read_bytes().endswith(b"\n")
    expected = sorted([f"m-{i}" for i in range(N)] + [f"x-{i}" for i in range(200)])
    assert sorted(exported + stored_ids(store, "orders/$DeadLetterQueue")) == expected
    assert len(set(exported)) == len(exported)


@pytest.mark.parametrize("kind", ["fifo", "symlink-to-fifo", "dev-null"])
def test_export_that_is_not_a_regular_file_is_refused(seeded: Engine, store: Path, tmp_path: Path, kind: str) -> None:
    """A FIFO blocked the run forever (deaf to SIGTERM) or failed with a traceback; /dev/null swallowed the export."""
    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    target = {"fifo": fifo, "symlink-to-fifo": tmp_path / "link.jsonl", "dev-null": Path("/dev/null")}[kind]
    if kind == "symlink-to-fifo":
        target.symlink_to(fifo)
    env = {**os.environ, "SBDLQ_EMULATOR": str(store), "SBDLQ_CONFIG": str(tmp_path / "none.yaml")}
    argv = [sys.executable, "-m", "sbdlq", "purge", "orders", "--yes", "--export", str(target)]
    argv.append("--export-follow-symlinks")
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "not a regular file" in lines[0], lines
    assert len(stored_ids(store, "orders/$DeadLetterQueue")) == N
