"""kill -9 during `routing enable-targeted` at every rule write (issue 25).

The real `sbdlq` runs in a subprocess whose Backend kills its own process (SIGKILL) right
after its Nth rule write reached the store, for each N short of the last. Every time, the
topic routes untagged messages exactly as before, `routing status` says it is half done, and
rerunning the command finishes it; `disable-targeted` then gives back the original rules.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli
from support.process import sbdlq_env

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.models import OutboundMessage

SUBSCRIPTIONS = ("sql", "corr", "act", "all")
STEPS = 8  # a target rule and one rewritten rule per subscription

# Runs the CLI with the emulator backend's rule writes counted; SIGKILL after the Nth.
_KILLING_RUN = """
import os, signal, sys
from sbdlq.backends.emulator import EmulatorBackend

limit, written = int(sys.argv[1]), [0]

def counted(write):
    async def wrapper(self, *args, **kwargs):
        await write(self, *args, **kwargs)
        written[0] += 1
        if written[0] >= limit:
            os.kill(os.getpid(), signal.SIGKILL)
    return wrapper

for name in ("create_rule", "update_rule", "delete_rule"):
    setattr(EmulatorBackend, name, counted(getattr(EmulatorBackend, name)))
sys.argv = ["sbdlq", "routing", "enable-targeted", "t", "--yes", "--accept-case-insensitive-names"]
from sbdlq.cli.main import run
run()
"""


def _topic(store: Path) -> None:
    with Engine(store) as eng:
        eng.create_topic("t")
        eng.create_subscription("t", "sql", rules=[Rule("eu", sql="region = 'eu'")])
        eng.create_subscription("t", "corr", rules=[Rule("us", correlation={"label": "L", "properties": {"r": "us"}})])
        eng.create_subscription("t", "act", rules=[Rule("x", sql="kind = 'x'", action="SET seen = 1")])
        eng.create_subscription("t", "all")


def _routing(store: Path) -> dict[str, list[tuple[str, Any]]]:
    """Send 12 untagged messages; what each subscription got (id, properties)."""
    sample = [
        OutboundMessage(
            body=b"x",
            message_id=f"m{i}",
            subject=("L", None)[i % 2],
            application_properties={
                "region": ("eu", "us", "ap")[i % 3],
                "r": ("us", "eu")[i // 6],
                "kind": "xy"[i % 2],
            },
        )
        for i in range(12)
    ]
    with Engine(store) as eng:
        eng.send("t", sample)
        out = {}
        for sub in SUBSCRIPTIONS:
            address = parse_address(f"t/Subscriptions/{sub}")
            got = eng.receive(address, 100)
            eng.complete(address, [m.lock_token or "" for m in got])
            out[sub] = sorted((m.message_id or "", sorted(m.application_properties.items())) for m in got)
        return out


def _rules(store: Path) -> dict[str, list[Rule]]:
    with Engine(store) as eng:
        return {sub: eng.rules(f"t/Subscriptions/{sub}") for sub in SUBSCRIPTIONS}


@pytest.mark.parametrize("kill_after", range(1, STEPS))
def test_kill_during_enable_targeted_leaves_untagged_routing_unchanged(
    kill_after: int, store: Path, tmp_path: Path, cli: Cli
) -> None:
    _topic(store)
    originals, before = _rules(store), _routing(store)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLING_RUN, str(kill_after)],
        env=sbdlq_env(store, SBDLQ_CONFIG=str(tmp_path / "none.yaml")),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    assert _routing(store) == before
    r = cli("routing", "status", "t", "-o", "json")
    assert r.exit_code == 0 and r.json()["state"] == "partial"
    r = cli("routing", "enable-targeted", "t", "--yes", "--accept-case-insensitive-names")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"plan: {STEPS - kill_after} rule change(s) on topic t:")
    assert cli("routing", "status", "t", "-o", "json").json()["state"] == "enabled"
    assert _routing(store) == before
    assert cli("routing", "disable-targeted", "t", "--yes").exit_code == 0
    assert _rules(store) == originals


# A targeted resubmit, one message per chunk, SIGKILLed right after its Nth chunk moved.
_KILLED_RESUBMIT = """
import os, signal, sys
from sbdlq.backends.emulator import EmulatorBackend

limit, moved = int(sys.argv[1]), [0]
real = EmulatorBackend.send_and_complete

async def send_and_complete(self, *args, **kwargs):
    left = await real(self, *args, **kwargs)
    moved[0] += 1
    if moved[0] >= limit:
        os.kill(os.getpid(), signal.SIGKILL)
    return left

EmulatorBackend.send_and_complete = send_and_complete
sys.argv = ["sbdlq", "resubmit", "t/Subscriptions/sql", "--only-this-subscription", "--batch-size", "1",
            "--concurrency", "1"]
from sbdlq.cli.main import run
run()
"""


def _targeted_sql_dlq(store: Path, cli: Cli, n: int) -> None:
    """`n` messages on topic t, dead-lettered in subscription sql only (the others took theirs),
    and targeted routing enabled on t."""
    _topic(store)
    with Engine(store) as eng:
        eng.send(
            "t",
            [OutboundMessage(body=b"x", message_id=f"m{i}", application_properties={"region": "eu"}) for i in range(n)],
        )
        for sub in ("corr", "act", "all"):
            address = parse_address(f"t/Subscriptions/{sub}")
            eng.complete(address, [m.lock_token or "" for m in eng.receive(address, 10)])
        sql = parse_address("t/Subscriptions/sql")
        eng.dead_letter(sql, [m.lock_token or "" for m in eng.receive(sql, 10)], "Bad", "broken")
    assert cli("routing", "enable-targeted", "t", "--yes", "--accept-case-insensitive-names").exit_code == 0


def test_a_killed_targeted_run_leaves_a_lease_that_force_takes_over(store: Path, tmp_path: Path, cli: Cli) -> None:
    """kill -9 during `resubmit --only-this-subscription` (issue 34): its lease stays on the broker, so
    `disable-targeted` refuses (exit 1) until it expires or `--force` takes it over; nothing is lost."""
    _targeted_sql_dlq(store, cli, 5)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_RESUBMIT, "2"],
        env=sbdlq_env(store, SBDLQ_CONFIG=str(tmp_path / "none.yaml")),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    status = cli("routing", "status", "t", "-o", "json").json()
    assert status["state"] == "enabled"
    [lease] = status["leases"]
    assert (lease["subscription"], lease["kind"], lease["live"]) == ("sql", "run", True)
    r = cli("routing", "disable-targeted", "t", "--yes")
    assert r.exit_code == 1
    assert r.stderr.startswith("sbdlq: targeted routing on topic t is in use by a targeted run (")
    assert cli("routing", "status", "t", "-o", "json").json()["state"] == "enabled"
    r = cli("routing", "disable-targeted", "t", "--yes", "--force")
    assert r.exit_code == 0, r.stderr
    status = cli("routing", "status", "t", "-o", "json").json()
    assert (status["state"], status["leases"]) == ("disabled", [])
    with Engine(store) as eng:
        counts = eng.counts("t/Subscriptions/sql")
        assert (counts.active, counts.dead_letter) == (2, 3)  # two moved before the kill, nothing lost
        assert all(eng.counts(f"t/Subscriptions/{s}").active == 0 for s in ("corr", "act", "all"))


# A targeted resubmit (one message per chunk) that pauses after its Nth chunk moved until told to go on.
_PAUSING_RESUBMIT = """
import asyncio, sys
from pathlib import Path
from sbdlq.backends.emulator import EmulatorBackend

gate, limit, moved = Path(sys.argv[1]), int(sys.argv[2]), [0]
real = EmulatorBackend.send_and_complete

async def send_and_complete(self, *args, **kwargs):
    left = await real(self, *args, **kwargs)
    moved[0] += 1
    if moved[0] == limit:
        (gate / "paused").touch()
        while not (gate / "go").exists():
            await asyncio.sleep(0.02)
    return left

EmulatorBackend.send_and_complete = send_and_complete
sys.argv = ["sbdlq", "resubmit", "t/Subscriptions/sql", "--only-this-subscription", "--batch-size", "1",
            "--concurrency", "1", "-o", "json"]
from sbdlq.cli.main import run
run()
"""


def test_disable_targeted_from_another_process_during_a_run(store: Path, tmp_path: Path, cli: Cli) -> None:
    """Two real processes (issue 34): while a targeted resubmit runs, `disable-targeted` is refused
    (exit 1) and changes nothing; `--force` goes through, and the run stops before its next chunk
    with exit 1, its report naming the subscriptions that may hold a copy; nothing is lost."""
    import time

    _targeted_sql_dlq(store, cli, 8)
    gate = tmp_path / "gate"
    gate.mkdir()
    run = subprocess.Popen(
        [sys.executable, "-c", _PAUSING_RESUBMIT, str(gate), "3"],
        env=sbdlq_env(store, SBDLQ_CONFIG=str(tmp_path / "none.yaml")),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120  # a hang guard
        while not (gate / "paused").exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        refused = cli("routing", "disable-targeted", "t", "--yes")
        assert (refused.exit_code, refused.stdout) == (1, "")
        assert refused.stderr.startswith("sbdlq: targeted routing on topic t is in use by a targeted run (")
        assert cli("routing", "status", "t", "-o", "json").json()["state"] == "enabled"
        forced = cli("routing", "disable-targeted", "t", "--yes", "--force")
        assert forced.exit_code == 0, forced.stderr
        (gate / "go").touch()
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, err
    doc = json.loads(out)
    assert (doc["selected"], doc["resubmitted"], doc["not_tried"]) == (8, 3, 5)
    assert err.splitlines()[-1].startswith(
        "sbdlq: this run's lease on topic t's targeted routing was taken over or removed: stopped before sending "
        "more copies (the rest stay in the DLQ); 5 message(s) were not resubmitted and remain in the queue; copies "
        "meant only for t/Subscriptions/sql may also be in subscription(s) "
    )
    strays = {s["subscription"]: s for s in doc["stray_copies"]}
    with Engine(store) as eng:
        counts = eng.counts("t/Subscriptions/sql")
        assert (counts.active, counts.dead_letter) == (3, 5)  # nothing lost
        for sub in ("corr", "act", "all"):
            held = eng.counts(f"t/Subscriptions/{sub}").active
            assert held == 0  # the third chunk went before the disable: none strayed
            assert sub not in strays or strays[sub]["at_most"] >= held
    assert set(strays) <= {"corr", "act", "all", "sql"} and strays["all"]["cause"] == "changed"
    # sql's own rule (region = 'eu') does not take everything: its last chunk may have missed it (it did not).
    assert strays["sql"] == {"subscription": "sql", "at_most": 1, "cause": "missed"}
