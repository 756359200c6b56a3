"""`apply`'s runner on every backend: a 4-rule policy over queues and a subscription, run three times
with the policy's clock moved between runs, the broker's state asserted after each run."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbdlq.addresses import Address, parse_entity
from sbdlq.backends.base import Backend
from sbdlq.errors import ExitStatus
from sbdlq.models import ATTEMPT
from sbdlq.policy.loader import load_policy
from sbdlq.policy.plan import Step, plan_policy
from sbdlq.policy.report import exit_status
from sbdlq.policy.runner import run_policy

if TYPE_CHECKING:
    from support import Seeder

EU = "billing/Subscriptions/eu"
HOUR, DAY = 3600.0, 86400.0

POLICY = """\
rules:
  - name: retry timeouts
    entities: [orders, "billing/Subscriptions/*"]
    reason: Timeout
    older_than: 1h
    resubmit: {{max_attempts: 1, then: purge, export: {exports}}}
  - name: drop expired
    entities: ["*"]
    reason: Expired
    older_than: 1h
    purge: {{export: {exports}}}
  - name: retry declined twice
    entities: [payments]
    reason: Declined
    resubmit: {{max_attempts: 2, then: keep, set_property: {{retried: true}}}}
  - name: page when orders pile up
    entities: [orders]
    alert: {{above: 4}}
"""


def fail_consumers(seed: Seeder, *entities: str) -> None:
    """Every active message of the entities dead-lettered again, as a failing consumer would."""
    for entity in entities:
        main = Address(parse_entity(entity))
        got = seed.engine.receive(main, 1000)
        reason = {"orders": "Timeout", EU: "Timeout", "payments": "Declined"}[entity]
        assert seed.engine.dead_letter(main, [m.lock_token for m in got if m.lock_token], reason, "again") == []


def attempts(messages: list[Any]) -> dict[str, Any]:
    return {m.message_id: m.application_properties.get(ATTEMPT) for m in messages}


def export_lines(folder: Path) -> dict[str, list[str]]:
    """Each export file's name → the message ids of its lines (every line a whole JSON record)."""
    out = {}
    for path in sorted(folder.iterdir()):
        text = path.read_text()
        assert text == "" or text.endswith("\n")
        # Sorted: without the SDK shortcuts a receive may hand a batch over in another order.
        out[path.name] = sorted(json.loads(line)["message_id"] for line in text.splitlines())
    return out


def test_a_policy_run_three_times_counts_attempts_and_handles_max_attempts(
    backend: Backend, seed: Seeder, aio: Any, tmp_path: Path, broker_clock: Callable[[], float] | None
) -> None:
    exports = tmp_path / "exports"
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.format(exports=exports))
    policy = load_policy(str(path))
    seed.queue("orders")
    seed.queue("payments")
    seed.topic("billing", "eu")
    seed.dead_letter("orders", 3, reason="Timeout", prefix="t")
    seed.dead_letter("orders", 2, reason="Expired", prefix="e")
    seed.dead_letter(EU, 2, reason="Timeout", prefix="b")
    seed.dead_letter("payments", 5, reason="Declined", prefix="p")
    clock = broker_clock or time.time

    def apply(shift_s: float, run_id: str) -> list[Step]:
        now = datetime.fromtimestamp(clock() + shift_s, UTC)
        steps = aio(plan_policy(backend, policy, now=now))
        return aio(run_policy(backend, steps, now=now, run_id=run_id))

    # Run 1, at once: nothing is an hour old; payments resubmitted (attempt 1); the alert fires (5 > 4).
    steps = apply(0, "run1")
    assert exit_status(steps) is ExitStatus.THRESHOLD
    assert [(s.rule.name, s.entity, s.status) for s in steps] == [
        ("retry timeouts", EU, "ok"),
        ("retry timeouts", "orders", "ok"),
        ("drop expired", EU, "ok"),
        ("drop expired", "orders", "ok"),
        ("drop expired", "payments", "ok"),
        ("retry declined twice", "payments", "ok"),
        ("page when orders pile up", "orders", "fired"),
    ]
    assert sorted(seed.dlq_ids("orders")) == ["e0", "e1", "t0", "t1", "t2"]
    assert seed.dlq_ids(EU) == ["b0", "b1"]
    assert seed.dlq("payments") == []
    copies = seed.active("payments")
    assert attempts(copies) == {f"p{i}": 1 for i in range(5)}
    assert all(m.application_properties["retried"] is True for m in copies)
    assert not exports.exists()  # nothing was deleted: no file
    fail_consumers(seed, "payments")

    # Run 2, two hours on: timeouts resubmitted (attempt 1), expired exported then purged, payments again (2).
    steps = apply(2 * HOUR, "run2")
    assert exit_status(steps) is ExitStatus.OK
    assert seed.dlq("orders") == [] and seed.dlq(EU) == [] and seed.dlq("payments") == []
    assert attempts(seed.active("orders")) == {"t0": 1, "t1": 1, "t2": 1}
    assert attempts(seed.active(EU)) == {"b0": 1, "b1": 1}
    assert attempts(seed.active("payments")) == {f"p{i}": 2 for i in range(5)}
    first_files = export_lines(exports)
    assert list(first_files.values()) == [["e0", "e1"]]
    (first_name,) = first_files
    assert first_name.startswith("orders-") and first_name.endswith("-run2-r2.jsonl")
    first_bytes = (exports / first_name).read_bytes()
    fail_consumers(seed, "orders", EU, "payments")
    seed.dead_letter("orders", 1, reason="Expired", prefix="late")

    # Run 3, eight days on: the timeouts reached max_attempts 1: exported and purged (then: purge);
    # payments reached 2: kept; the late expired one goes to a new file; the first file is untouched.
    steps = apply(8 * DAY, "run3")
    assert exit_status(steps) is ExitStatus.OK
    by = {(s.rule.name, s.entity): s for s in steps}
    orders_retry = by[("retry timeouts", "orders")]
    assert (orders_retry.matched, orders_retry.at_max) == (0, 3)
    assert orders_retry.then_result is not None and orders_retry.then_result["purged"] == 3
    kept = by[("retry declined twice", "payments")]
    assert (kept.matched, kept.at_max, kept.then_result) == (0, 5, {"then": "keep", "kept": 5})
    assert by[("page when orders pile up", "orders")].status == "ok"
    assert seed.dlq("orders") == [] and seed.dlq(EU) == [] and seed.active("orders") == []
    assert attempts(seed.dlq("payments")) == {f"p{i}": 2 for i in range(5)}
    files = export_lines(exports)
    assert (exports / first_name).read_bytes() == first_bytes
    new = {name: ids for name, ids in files.items() if name != first_name}
    assert sorted(new.values()) == [["b0", "b1"], ["late0"], ["t0", "t1", "t2"]]
    assert all("-run3-" in name for name in new)
