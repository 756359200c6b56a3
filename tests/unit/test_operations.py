"""The pieces under resubmit and purge: retries, rate, lock keeping, copies, export, output."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import io
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import PRODUCER_FIELDS, run_virtual

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend, ReceiveMode
from sbdlq.errors import BadInput, EntityDisabled, OperationFailed, TransientError
from sbdlq.models import Counts, EntityInfo, Message, OutboundMessage
from sbdlq.operations import retries
from sbdlq.operations.browse import group_key
from sbdlq.operations.export import Exporter
from sbdlq.operations.lock_keeper import LockKeeper
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.planning import plan_limit
from sbdlq.operations.ratelimit import RateLimiter
from sbdlq.operations.resubmit import COPIED_FIELDS, make_copy
from sbdlq.operations.retries import retrying
from sbdlq.output.formats import Emitter
from sbdlq.output.render import Col, cell_text, clip, layout
from sbdlq.results import PurgeResult, ResubmitResult

DLQ = Address(EntityPath("q"), SubQueue.DEAD_LETTER)
NOW = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


def msg(seq: int = 1, token: str | None = None, **fields: Any) -> Message:
    fields.setdefault("enqueued_time", NOW)
    return Message(sequence_number=seq, body=fields.pop("body", b"x"), lock_token=token, **fields)


class Renewer(Backend):
    """Only renew_locks does anything: it answers at once (no await inside), like the emulator."""

    def __init__(self, lost: set[str] | None = None, fail: int = 0) -> None:
        self.renewals: list[list[str]] = []
        self.lost = lost or set()
        self.fail = fail

    async def renew_locks(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        if self.fail:
            self.fail -= 1
            raise EntityDisabled("renewal refused")
        self.renewals.append([m.lock_token or "" for m in messages])
        return [m for m in messages if m.lock_token in self.lost]

    async def list_entities(self) -> list[EntityInfo]:
        raise NotImplementedError

    async def get_entity(self, entity: EntityPath) -> EntityInfo:
        raise NotImplementedError

    async def counts(self, entity: EntityPath) -> Counts:
        raise NotImplementedError

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        raise NotImplementedError

    async def _receive(self, address: Address, max_count: int, mode: ReceiveMode, max_wait_s: float) -> list[Message]:
        raise NotImplementedError

    async def complete(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        raise NotImplementedError

    async def abandon(self, address: Address, messages: Sequence[Message]) -> list[Message]:
        raise NotImplementedError

    async def dead_letter(
        self, address: Address, messages: Sequence[Message], reason: str, description: str
    ) -> list[Message]:
        raise NotImplementedError

    async def send(self, entity: EntityPath, messages: Sequence[OutboundMessage]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        pass


# ---------------------------------------------------------------- limits, retries, rate


def test_plan_limit_is_the_smaller_of_max_and_what_is_there() -> None:
    assert plan_limit(None, 7) == 7
    assert plan_limit(3, 7) == 3
    assert plan_limit(30, 7) == 7
    assert plan_limit(None, -1) == 0


def test_retrying_retries_transient_errors_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retries, "RETRY_BASE_S", 0.001)
    stats = LoopStats()
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise TransientError("busy")
        return "ok"

    assert asyncio.run(retrying(flaky, stats)) == "ok"
    assert (calls, stats.retries) == (3, 2)

    async def always() -> None:
        raise TransientError("down")

    with pytest.raises(TransientError):
        asyncio.run(retrying(always, stats, attempts=3))
    assert stats.retries == 4

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise EntityDisabled("disabled")

    calls = 0
    with pytest.raises(EntityDisabled):
        asyncio.run(retrying(refused, stats))
    assert calls == 1


def test_rate_limiter_spaces_messages() -> None:
    async def take(rate: float | None) -> float:
        limiter = RateLimiter(rate)
        started = asyncio.get_running_loop().time()
        for _ in range(5):
            await limiter.take(2)
        return asyncio.get_running_loop().time() - started

    # 10 messages at 100/s: the first go at once, the last 2 wait until 80 ms.
    assert run_virtual(take(100)) == pytest.approx(0.08)
    assert run_virtual(take(None)) == 0


# ---------------------------------------------------------------- lock keeping


def test_lock_keeper_renews_at_half_the_lock_and_never_spins() -> None:
    backend = Renewer()
    stats = LoopStats()

    async def run() -> None:
        keeper = LockKeeper(backend, DLQ, stats, lock_duration_s=0.2)
        keeper.hold([msg(1, "t1", locked_until=datetime.now(UTC) + timedelta(seconds=0.2))])
        await asyncio.sleep(0.55)
        await keeper.stop()

    run_virtual(run())
    # Every 0.1 s of (virtual) time: five renewals, not thousands (a renewal that answers at
    # once must not turn the keeper into a busy loop: run_virtual reports one) and not none.
    assert len(backend.renewals) == 5
    assert stats.renewals == len(backend.renewals)


def test_lock_keeper_follows_a_broker_lock_shorter_than_the_entity_says() -> None:
    backend = Renewer()

    async def run() -> None:
        keeper = LockKeeper(backend, DLQ, LoopStats(), lock_duration_s=60)
        keeper.hold([msg(1, "t1", locked_until=datetime.now(UTC) + timedelta(seconds=0.2))])
        await asyncio.sleep(0.15)
        await keeper.stop()

    run_virtual(run())
    assert backend.renewals == [["t1"]]


def test_lock_keeper_drops_lost_locks_and_stops_renewing_released_ones() -> None:
    backend = Renewer(lost={"t2"})
    stats = LoopStats()
    keeper_ref: list[LockKeeper] = []

    async def run() -> None:
        keeper = LockKeeper(backend, DLQ, stats, lock_duration_s=0.1)
        keeper_ref.append(keeper)
        a, b, c = msg(1, "t1"), msg(2, "t2"), msg(3, "t3")
        keeper.hold([a, b, c])
        await asyncio.sleep(0.08)
        keeper.release([c])
        await asyncio.sleep(0.12)
        await keeper.stop()

    run_virtual(run())
    keeper = keeper_ref[0]
    assert keeper.lost == {"t2"}
    assert set(keeper.held) == {"t1"}
    renewed = [t for call in backend.renewals for t in call]
    assert renewed.count("t2") == 1
    assert renewed.count("t1") >= 2 and renewed.count("t3") <= 1


def test_lock_keeper_records_a_failed_renewal_and_tries_again() -> None:
    backend = Renewer(fail=1)
    stats = LoopStats()

    async def run() -> None:
        keeper = LockKeeper(backend, DLQ, stats, lock_duration_s=0.2)
        keeper.hold([msg(1, "t1")])
        await asyncio.sleep(0.3)
        await keeper.stop()

    run_virtual(run())
    assert stats.errors == ["lock renewal failed: renewal refused"]
    assert backend.renewals and backend.renewals[0] == ["t1"]


def test_a_lock_whose_renewals_keep_failing_counts_as_lost_once_it_ends() -> None:
    """Issue 24 #6: a lock that cannot be kept must stop its message's send. Renewals failing for
    the whole lock duration mean the broker's lock has ended: nothing may be sent for it."""
    backend = Renewer(fail=10**6)
    seen: list[tuple[float, bool]] = []

    async def run() -> None:
        keeper = LockKeeper(backend, DLQ, LoopStats(), lock_duration_s=4.0)
        m = msg(1, "t1")
        keeper.hold([m])
        for _ in range(5):
            seen.append((asyncio.get_running_loop().time(), keeper.is_lost(m)))
            await asyncio.sleep(1.5)
        await keeper.stop()

    run_virtual(run())
    start = seen[0][0]
    assert [(round(t - start, 1), lost) for t, lost in seen] == [
        (0.0, False),
        (1.5, False),
        (3.0, False),
        (4.5, True),
        (6.0, True),
    ]


# ---------------------------------------------------------------- copies


def test_make_copy_keeps_what_a_producer_set_and_marks_the_source() -> None:
    m = msg(
        42,
        "tok",
        **PRODUCER_FIELDS,
        delivery_count=10,
        dead_letter_source="q",
        application_properties={"DeadLetterReason": "R", "DeadLetterErrorDescription": "D", "k": 1},
    )
    c = make_copy(m, source=DLQ)
    assert c == OutboundMessage(
        **PRODUCER_FIELDS,
        application_properties={"k": 1, "sbdlq-resubmitted-from": "q/$DeadLetterQueue:42", "sbdlq-attempt": 1},
    )
    kept = make_copy(m, source=DLQ, keep_dead_letter_properties=True, new_message_id=True)
    assert kept.application_properties["DeadLetterReason"] == "R"
    assert kept.message_id not in (None, PRODUCER_FIELDS["message_id"])
    # The original's properties are not touched.
    assert "sbdlq-resubmitted-from" not in m.application_properties


@pytest.mark.parametrize(
    ("given", "counted"), [(None, 1), (1, 2), (4, 5), ("2", 3), (2.0, 3), (2.5, 1), ("many", 1), (True, 1), (-3, 1)]
)
def test_every_copy_counts_its_attempt(given: object, counted: int) -> None:
    props = {} if given is None else {"sbdlq-attempt": given}
    m = Message(7, b"x", datetime(2025, 1, 1, tzinfo=UTC), application_properties=props)
    assert make_copy(m, source=DLQ).application_properties["sbdlq-attempt"] == counted


def test_make_copy_copies_each_of_the_copied_fields_into_its_own_field() -> None:
    """make_copy builds OutboundMessage positionally: each kept field must land in its own."""
    values: dict[str, Any] = {name: f"value of {name}" for name in COPIED_FIELDS}
    values.update(body=b"the body", time_to_live_s=12.5, amqp=b"sections")
    m = msg(7, "tok", **values)
    c = make_copy(m, source=DLQ)
    for name in COPIED_FIELDS:
        assert getattr(c, name) == values[name], name
    assert c.scheduled_enqueue_time is None
    # Every other field of a copy is made, not kept: its properties and its schedule.
    assert {f.name for f in dataclasses.fields(OutboundMessage)} - set(COPIED_FIELDS) == {
        "application_properties",
        "scheduled_enqueue_time",
    }


# ---------------------------------------------------------------- results


def test_run_results_share_one_json_shape_and_summary() -> None:
    r = ResubmitResult(selected=9, failed=2, not_matching=4, retries=1, elapsed_s=1.23456)
    r.done = 7
    assert r.resubmitted == 7
    assert json.dumps(r.to_json()) == (
        '{"selected": 9, "resubmitted": 7, "failed": 2, "not_tried": 0, "left_beside_copy": 0, "left_unconfirmed": 0, '
        '"left_unchecked": 0, "not_received": 0, "not_matching": 4, "skipped": 4, "unroutable": 0, '
        '"dry_run": false, "elapsed_s": 1.235, "sdk_fallbacks": []}'
    )
    assert r.summary() == "resubmitted 7 of 9 selected message(s) in 1.23s (2 failed, 4 not matching, 1 retries)"
    p = PurgeResult(selected=5, purged=5, exported=5, elapsed_s=0.5)
    assert json.dumps(p.to_json()) == (
        '{"selected": 5, "purged": 5, "exported": 5, "failed": 0, "not_tried": 0, "left_beside_copy": 0, '
        '"left_unchecked": 0, "not_received": 0, "not_matching": 0, "dry_run": false, "elapsed_s": 0.5, '
        '"sdk_fallbacks": []}'
    )
    assert p.summary() == "purged 5 of 5 selected message(s) in 0.50s (5 exported)"
    assert PurgeResult(selected=3).summary() == "purged 0 of 3 selected message(s) in 0.00s"


def test_a_run_that_fails_and_leaves_originals_beside_copies_names_both_and_advises_truly() -> None:
    """Issue 24 #7: `resubmitted 90, failed 1904` of 2000 hid 6 originals left beside their copy,
    and "run the command again" would have sent those 6 a second time."""
    r = ResubmitResult(
        selected=2000,
        resubmitted=90,
        failed=1,
        not_tried=1903,
        left_beside_copy=6,
        left_sequences=[7, 5, 6, 100, 201, 200],
        errors=["send to retry failed: gone"],
    )
    assert r.unaccounted() == 0
    assert r.summary() == (
        "resubmitted 90 of 2000 selected message(s) in 0.00s (1 failed, 1903 not tried, 6 left beside their copy)"
    )
    assert r.to_json()["left_beside_copy"] == 6
    assert r.left_over() == (
        "send to retry failed: gone; 1904 message(s) were not resubmitted and remain in the queue; "
        "6 original(s) stayed in the queue after their copy was sent (sequence numbers 5-7, 100, 200-201); "
        "running the command again would send those originals a second time: check the target, purge them "
        "(purge --sequence), then run the command again"
    )
    # Another receiver's messages alone fail nothing.
    assert ResubmitResult(selected=3, resubmitted=2, not_received=1).left_over() is None


def test_a_dry_run_summary_says_what_would_happen() -> None:
    assert ResubmitResult(selected=4, dry_run=True).summary() == "dry run: 4 message(s) would be resubmitted"
    assert PurgeResult(selected=4, dry_run=True).summary() == "dry run: 4 message(s) would be deleted"


# ---------------------------------------------------------------- export file


def test_exporter_cuts_a_torn_last_line_from_a_crashed_run(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    ex = Exporter(path)
    ex.write([msg(1), msg(2)])
    ex.close()
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"sequence_nu')
    ex = Exporter(path)
    ex.write([msg(7)])
    ex.close()
    assert path.read_bytes().startswith(whole)
    lines = path.read_text().splitlines()
    assert [json.loads(line)["sequence_number"] for line in lines] == [1, 2, 7]


def test_exporter_repairs_a_file_that_is_one_torn_record(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"sequence_number": 12, "message_id": "' + b"x" * 70000)
    Exporter(path).close()
    assert path.read_bytes() == b""


def test_exporter_refuses_a_file_that_is_one_foreign_line(tmp_path: Path) -> None:
    """An unterminated line that isn't an export record is someone's data (a token file): never cut."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"x" * 70000)
    with pytest.raises(BadInput, match="not an sbdlq JSONL export"):
        Exporter(path)
    assert path.read_bytes() == b"x" * 70000


def test_a_failed_write_leaves_only_whole_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.jsonl"
    ex = Exporter(path)
    ex.write([msg(1)])
    real_pwrite = os.pwrite

    def half_then_full(fd: int, data: Any, offset: int) -> int:
        if len(data) > 20:
            return real_pwrite(fd, bytes(data[: len(data) // 2]), offset)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", half_then_full)
    with pytest.raises(OperationFailed) as info:
        ex.write([msg(2), msg(3)])
    monkeypatch.undo()
    ex.close()
    assert info.value.line() == f"cannot write export file {path}: No space left on device"
    assert [json.loads(line)["sequence_number"] for line in path.read_text().splitlines()] == [1]


def test_an_export_file_that_cannot_be_opened_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput):
        Exporter(tmp_path / "missing-dir" / "x.jsonl")


# ---------------------------------------------------------------- grouping


def test_group_key_kinds_are_case_insensitive_property_names_are_not() -> None:
    m = msg(application_properties={"Tenant": "eu", "DeadLetterReason": "R"})
    assert group_key("REASON")(m) == "R"
    assert group_key("property:Tenant")(m) == "eu"
    assert group_key("property:tenant")(m) == "(none)"
    assert group_key("day")(m) == "2026-01-31"
    assert group_key("hour")(msg(enqueued_time=datetime(2026, 1, 31, 23, 59, tzinfo=UTC))) == "2026-01-31T23:00Z"
    for bad in ("property:", "reasons", "reason:x", ""):
        with pytest.raises(BadInput):
            group_key(bad)


# ---------------------------------------------------------------- output


def test_json_emitter_is_one_document_for_any_number_of_items() -> None:
    for n in (0, 1, 3):
        out = io.StringIO()
        e = Emitter("json", out=out)
        e.begin()
        for i in range(n):
            e.item({"i": i})
        e.end()
        assert json.loads(out.getvalue()) == [{"i": i} for i in range(n)]


def test_yaml_and_jsonl_emitters_stream_records() -> None:
    import yaml

    out = io.StringIO()
    e = Emitter("yaml", out=out)
    e.begin()
    e.item({"a": 1})
    e.item({"a": 2})
    e.end()
    assert yaml.safe_load(out.getvalue()) == [{"a": 1}, {"a": 2}]
    out = io.StringIO()
    e = Emitter("jsonl", out=out)
    e.begin()
    e.end()
    assert out.getvalue() == ""


def test_cells_are_one_line_without_control_characters() -> None:
    assert cell_text("a\nb\tc\r\nd") == "a b c d"
    assert cell_text("\x1b[2Jred") == "\N{REPLACEMENT CHARACTER}[2Jred"
    assert cell_text(None) == ""
    assert clip("abcdef", 4) == "abc…"
    assert clip("abc", 3) == "abc"


def test_layout_drops_the_least_telling_columns_then_shrinks() -> None:
    cols = [Col("seq", numeric=True), Col("a", min_width=10), Col("extra", min_width=10, drop=1), Col("b", min_width=5)]
    rows = [["1", "x" * 30, "y" * 30, "z" * 30]]
    wide = layout(cols, rows, 200)
    assert wide == [(0, 3), (1, 30), (2, 30), (3, 30)]
    narrow = layout(cols, rows, 40)
    assert [i for i, _ in narrow] == [0, 1, 3]
    # 3 columns: 10 characters of rules and padding, 30 for the text.
    assert sum(w for _, w in narrow) + 10 == 40
    assert dict(narrow)[0] == 3
