"""kill -9 at each moment of a `purge --export` batch, then replay the file: each message once (issue 34, item 5).

A batch is written (marked `"sbdlq_deleted": 0`) and synced, deleted, then marked 1 in place. The
process kills itself (SIGKILL, at the line named) in a seeded batch: mid-write (a torn record),
after the sync, after the delete and before any mark, and halfway through the marks. After each:
- nothing is lost: every message is in the DLQ or in the file;
- the file alone tells what may still be in the DLQ: no record marked 1 is in the DLQ, and at most
  one batch (--batch-size) is marked 0;
- a replay of the file sends exactly the records marked 1: none of them is in the DLQ, none twice.
Then the purge runs again to the end onto the same file, and a replay of it (plus, with
`--resume --include-held-back`, the records whose delete the killed run never marked) puts
every message into the target exactly once.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
from support import dead_letter_all, stored_ids
from support.process import KILL_PRELUDE, run_or_kill, sbdlq_env, start_sbdlq

from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

pytestmark = pytest.mark.slow

N = 400
BATCH = 50
LOCK_S = 60.0
DLQ = "orders/$DeadLetterQueue"

#: Runs `sbdlq` with a SIGKILL at one line of the export's batch cycle, in the batch TEST_KILL_AT names.
KILLING = (
    KILL_PRELUDE
    + """
from sbdlq.operations import export

if moment == "torn":
    real_pwrite = os.pwrite
    def pwrite(fd, data, offset):
        if len(data) > 1 and nth():  # a batch of records (a mark is one byte): half of it, then the kill
            real_pwrite(fd, bytes(data[: len(data) // 2]), offset)
            die()
        return real_pwrite(fd, data, offset)
    os.pwrite = pwrite
elif moment == "synced":
    real_write = export.Exporter.write_pending
    def write_pending(self, messages):
        marks = real_write(self, messages)
        if nth():
            die()  # written and synced; the delete never asked
        return marks
    export.Exporter.write_pending = write_pending
else:
    real_confirm = export.Exporter.confirm
    def confirm(self, marks):
        if nth():
            if moment == "marking":
                real_confirm(self, marks[: len(marks) // 2])
            die()  # deleted; no mark set ("deleted") or half of them ("marking")
        return real_confirm(self, marks)
    export.Exporter.confirm = confirm

sys.argv[0] = "sbdlq"
from sbdlq.entry import main
main()
"""
)

MOMENTS = ["torn", "synced", "deleted", "marking"]


def _seed(store: Path) -> set[str]:
    eng = Engine(store)
    eng.create_queue("orders", lock_duration_s=LOCK_S)
    for name in ("mid", "final"):
        eng.create_queue(name)
    messages = [OutboundMessage(body=f"order {i}".encode(), message_id=f"m-{i}") for i in range(N)]
    dead_letter_all(eng, "orders", messages, "Crash", "test")
    eng.close()
    return {m.message_id or "" for m in messages}


def _records(path: Path, *, torn_allowed: bool) -> list[tuple[str, int]]:
    """(message id, delete mark) of the file's whole records; a torn tail only where the kill tore it."""
    whole, _, torn = path.read_bytes().rpartition(b"\n")
    if torn:
        assert torn_allowed, f"a torn last line where no write was cut: {torn[:60]!r}"
        assert torn.startswith(b'{"sequence_number": '), torn[:60]
    docs = [json.loads(line) for line in whole.decode().splitlines()]
    return [(d["message_id"], d["sbdlq_deleted"]) for d in docs]


def _replay(export: Path, target: str, state: Path, env: dict[str, str], *more: str) -> int:
    """Replay a copy of the export (the purge's own file stays untouched); its exit status."""
    copy = state.with_suffix(".jsonl")
    shutil.copyfile(export, copy)
    proc = start_sbdlq(["replay", str(copy), "--to", target, "--state", str(state), *more], env)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode in (0, 1), stderr
    assert "Traceback" not in stderr
    return proc.returncode


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_purge_export_killed_at_each_moment_replays_each_message_once(tmp_path: Path, moment: str) -> None:
    store, export = tmp_path / "store.db", tmp_path / "export.jsonl"
    all_ids = _seed(store)
    batch = random.Random(f"sbdlq-export-kill-{moment}").randint(2, N // BATCH - 2)
    argv = ["purge", "orders", "--yes", "--batch-size", str(BATCH), "--concurrency", "8", "--export", str(export)]
    env = sbdlq_env(store, TEST_KILL_AT=f"{moment}:{batch}")
    proc = start_sbdlq(argv, env, quiet=True, script=KILLING)
    proc.wait(timeout=120)
    assert proc.returncode == -9, f"the run ended ({proc.returncode}) before its kill in batch {batch}"

    # Just after the kill: nothing lost, and the marks tell what may still be in the DLQ.
    later = sbdlq_env(store, SBDLQ_EMULATOR_CLOCK_SKEW=f"{LOCK_S + 1}s")  # the killed run's locks lapsed
    dlq = set(stored_ids(store, DLQ, clock=lambda: time.time() + LOCK_S + 1))
    records = _records(export, torn_allowed=moment == "torn")
    marked = {mid for mid, mark in records if mark == 1}
    unmarked = {mid for mid, mark in records if mark == 0}
    assert all_ids == dlq | marked | unmarked, "lost a message"
    assert not marked & dlq, "a record marked deleted is still in the DLQ"
    assert len(unmarked) <= BATCH
    assert len(records) == len({mid for mid, _ in records}), "a message exported twice by one run"
    assert _replay(export, "mid", tmp_path / "mid.state", later) == (1 if unmarked else 0)
    mid = Counter(stored_ids(store, "mid"))
    assert set(mid) == marked and max(mid.values()) == 1
    assert not set(mid) & dlq, "replay sent a copy of a message still in the DLQ"

    # The purge again, onto the same file, to the end; then the file replayed: each message once.
    assert run_or_kill(argv, later, kill_after=None) == 0
    assert stored_ids(store, DLQ, clock=lambda: time.time() + 10 * LOCK_S) == []
    records = _records(export, torn_allowed=False)
    assert {mid for mid, _ in records} == all_ids
    state = tmp_path / "final.state"
    first = _replay(export, "final", state, later)
    assert first == (1 if moment in ("deleted", "marking") else 0)  # held back: deleted, never marked
    assert _replay(export, "final", state, later, "--resume", "--include-held-back") == 0
    final = Counter(stored_ids(store, "final"))
    assert set(final) == all_ids and max(final.values()) == 1


def test_the_killing_script_runs_sbdlq(tmp_path: Path) -> None:
    """The wrapper passes its arguments to sbdlq: a kill that never comes leaves a finished run."""
    store = tmp_path / "store.db"
    _seed(store)
    proc = start_sbdlq(["count", "orders", "-o", "json"], sbdlq_env(store, TEST_KILL_AT="synced:1"), script=KILLING)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and json.loads(out)[0]["dead_letter"] == N
