"""`sbdlq apply` as cron runs it: two runs of one policy at once (one runs, the other exits 1 at once,
nothing moves twice), and a kill -9 mid-run (nothing lost, duplicates within --concurrency, the
next run finishes the job). The real `sbdlq` in subprocesses, against an emulator store that
stands in for a far namespace (SBDLQ_EMULATOR_LATENCY), so a run is long enough to race.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from support import dead_letter_all, stored_ids
from support.process import sbdlq_env, start_sbdlq

from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage
from sbdlq.policy.lock import lock_path
from sbdlq.statedir import STATE_DIR_ENV as LOCK_DIR_ENV

pytestmark = pytest.mark.slow

LOCK_S = 60.0
CONCURRENCY = 8
#: How long a test waits for a subprocess to reach a point (a bound, not a measured time).
PATIENCE_S = 120.0

POLICY = f"""\
rules:
  - name: retry
    entities: [orders]
    resubmit: {{to: retry, batch_size: 20, concurrency: {CONCURRENCY}}}
  - name: archive
    entities: [archive]
    purge: {{export: EXPORTS, batch_size: 5}}
"""


def _seed(store: Path, orders: int, archive: int) -> None:
    eng = Engine(store)
    for name in ("orders", "archive"):
        eng.create_queue(name, lock_duration_s=LOCK_S)
    eng.create_queue("retry")
    dead_letter_all(eng, "orders", [OutboundMessage(body=b"o", message_id=f"o-{i}") for i in range(orders)], "X", "")
    dead_letter_all(eng, "archive", [OutboundMessage(body=b"a", message_id=f"a-{i}") for i in range(archive)], "X", "")
    eng.close()


def _setup(tmp_path: Path, orders: int, archive: int) -> tuple[Path, Path, Path, dict[str, str]]:
    store, exports, policy = tmp_path / "store.db", tmp_path / "exports", tmp_path / "policy.yaml"
    _seed(store, orders, archive)
    policy.write_text(POLICY.replace("EXPORTS", str(exports)))
    env = sbdlq_env(store, SBDLQ_EMULATOR_LATENCY="10ms", **{LOCK_DIR_ENV: str(tmp_path / "state")})
    return store, exports, policy, env


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll until `condition` holds (an event seen in the store or the lock file), within PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _export_ids(exports: Path) -> Counter[str]:
    seen: Counter[str] = Counter()
    for path in exports.glob("*.jsonl") if exports.exists() else []:
        data = path.read_text()
        assert not data or data.endswith("\n"), f"{path.name} ends with a torn line"
        seen.update(json.loads(line)["message_id"] for line in data.splitlines())
    return seen


def _held_by(lock: Path, pid: int) -> bool:
    try:
        return lock.read_text().strip() == str(pid)
    except FileNotFoundError:
        return False


def test_two_runs_at_once_one_runs_and_the_other_exits_1_at_once(tmp_path: Path) -> None:
    n = 4000  # at 10 ms a round trip, several seconds: the second run is refused long before it ends
    store, _, policy, env = _setup(tmp_path, n, 0)
    argv = ["apply", str(policy), "--yes", "-o", "none"]
    first = start_sbdlq(argv, env)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(LOCK_DIR_ENV, env[LOCK_DIR_ENV])
            lock = lock_path(str(policy))
        _wait_for(lambda: _held_by(lock, first.pid) or first.poll() is not None, "the first run to take its lock")
        second = start_sbdlq(argv, env)
        _, err = second.communicate(timeout=PATIENCE_S)
        assert second.returncode == 1, err
        assert err == (
            f"sbdlq: another sbdlq apply of {policy} is running (pid {first.pid}); this run did nothing "
            "(it runs the rules; let it finish)\n"
        )
        assert first.poll() is None, "the first run ended before the second was refused: the race was not run"
        _, err = first.communicate(timeout=PATIENCE_S)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
    moved = Counter(stored_ids(store, "retry"))
    assert set(moved) == {f"o-{i}" for i in range(n)} and max(moved.values()) == 1  # nothing moved twice
    assert stored_ids(store, "orders/$DeadLetterQueue") == []


def test_a_kill_9_during_apply_loses_nothing_and_the_next_run_finishes(tmp_path: Path) -> None:
    orders, archive = 1500, 300
    store, exports, policy, env = _setup(tmp_path, orders, archive)
    order_ids = {f"o-{i}" for i in range(orders)}
    archive_ids = {f"a-{i}" for i in range(archive)}
    proc = start_sbdlq(["apply", str(policy), "--yes", "-o", "none"], env, quiet=True)
    try:
        _wait_for(lambda: len(stored_ids(store, "retry")) > 0 or proc.poll() is not None, "the first copies")
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()

    def check(skew: float) -> tuple[Counter[str], Counter[str]]:
        def ids(path: str) -> list[str]:
            return stored_ids(store, path, clock=lambda: time.time() + skew)

        resubmitted = Counter(ids("orders/$DeadLetterQueue")) + Counter(ids("retry"))
        purged = Counter(ids("archive/$DeadLetterQueue")) + _export_ids(exports)
        assert set(resubmitted) == order_ids, "a resubmitted message was lost"
        assert set(purged) >= archive_ids, "a purged message was lost"
        assert sum(resubmitted.values()) - orders <= CONCURRENCY, "more duplicates than --concurrency"
        return resubmitted, purged

    check(LOCK_S + 1)
    files_before = {p.name: p.read_bytes() for p in exports.glob("*")} if exports.exists() else {}
    # The next run, once the killed run's locks have lapsed, finishes the job.
    env["SBDLQ_EMULATOR_CLOCK_SKEW"] = f"{LOCK_S + 1}s"
    done = subprocess.run(
        [sys.executable, "-m", "sbdlq", "apply", str(policy), "--yes", "-o", "none"],
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )
    assert done.returncode == 0, done.stderr
    resubmitted, _ = check(LOCK_S + 1)
    skewed = lambda: time.time() + LOCK_S + 1  # noqa: E731
    assert stored_ids(store, "orders/$DeadLetterQueue", clock=skewed) == []
    assert stored_ids(store, "archive/$DeadLetterQueue", clock=skewed) == []
    assert set(_export_ids(exports)) == archive_ids
    # The killed run's export file (if it made one) is untouched: the next run wrote a new one.
    assert {name: (exports / name).read_bytes() for name in files_before} == files_before
    assert set(resubmitted) == order_ids


def test_sigterm_stops_the_rule_in_flight_reports_and_skips_the_rest(tmp_path: Path) -> None:
    store, _, policy, env = _setup(tmp_path, 1500, 10)
    proc = start_sbdlq(["apply", str(policy), "--yes", "-o", "json"], env)
    try:
        _wait_for(lambda: len(stored_ids(store, "retry")) > 0 or proc.poll() is not None, "the first copies")
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert err.splitlines()[-1] == "sbdlq: terminated (SIGTERM); messages not yet settled stay in their queue"
    retry, archive = json.loads(out)
    assert (retry["status"], archive["status"]) == ("interrupted", "skipped")
    moved = retry["result"]["resubmitted"]
    assert 0 < moved < 1500
    assert len(stored_ids(store, "retry")) == moved  # what the report says left the DLQ, no more
    assert len(stored_ids(store, "archive/$DeadLetterQueue")) == 10  # the next rule did not run
