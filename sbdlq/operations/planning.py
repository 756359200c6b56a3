"""What a moving run will take before it starts (the plan: a count, or a scan of the selection),
how many the DLQ holds as it goes, and the note on selected messages that never came."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, SbdlqError
from sbdlq.models import Message
from sbdlq.operations.browse import dlq_count, iter_messages
from sbdlq.operations.loop_stats import LoopStats
from sbdlq.operations.retries import retrying
from sbdlq.selection import Selection


@dataclass
class Plan:
    """What a moving run will take: how many, and (after a scan) where the last match is."""

    selected: int
    last_sequence: int | None = None
    #: the DLQ's count the plan was made from (None after a scan)
    counted: int | None = None
    #: messages the scan read and the selection passed over (0 without a scan)
    passed_over: int = 0
    #: when the scan took nothing of a DLQ that was not empty: the values nearest the selection
    hint: str | None = None


async def plan_run(
    backend: Backend,
    source: Address,
    selection: Selection,
    *,
    max_count: int | None,
    scan: bool,
    progress: Callable[[int | None], Callable[[int], None]] | None = None,
) -> Plan:
    """Count what a run will take: a browse (no locks) when selecting, else the DLQ's count."""
    if scan or not selection.is_empty:
        from sbdlq.nearest import PassedOver

        plan = Plan(0)
        tick = progress(None) if progress else None
        passed = PassedOver(selection)
        scan_all = iter_messages(backend, source, selection=selection, limit=max_count, on_page=tick, on_passed=passed)
        groups = FingerprintPrefixes(selection)
        async for m in scan_all:
            plan.selected += 1
            plan.last_sequence = m.sequence_number
            groups.see(m)
        groups.pin()
        plan.passed_over = passed.count
        if plan.selected == 0:
            plan.hint = passed.hint()
        return plan
    counted = dlq_count(await backend.counts(source.entity), source.sub_queue)
    return Plan(plan_limit(max_count, counted), counted=counted)


class FingerprintPrefixes:
    """A `--fingerprint` prefix must name one group, as git refuses an ambiguous short id.

    The plan sees which groups each short prefix took; `pin()` refuses one that took several
    (exit 2, before anything moves) and narrows each to the id it took, so the run that follows
    takes no other group that reaches the DLQ meanwhile.
    """

    def __init__(self, selection: Selection) -> None:
        from sbdlq.fingerprint import ID_LENGTH

        self.selection = selection
        self.seen: dict[str, set[str]] = {p: set() for p in selection.fingerprints if len(p) < ID_LENGTH}

    def see(self, m: Message) -> None:
        if not self.seen:
            return
        from sbdlq.fingerprint import message_fingerprint

        fid = message_fingerprint(m).id
        for prefix, ids in self.seen.items():
            if fid.startswith(prefix) and len(ids) < 5:
                ids.add(fid)

    def pin(self) -> None:
        for prefix, ids in self.seen.items():
            if len(ids) > 1:
                raise BadInput(
                    f"--fingerprint {prefix} is ambiguous: it starts {len(ids)} groups here ({', '.join(sorted(ids))})",
                    hint="give more of its 8 hex digits",
                )
        pinned = {p: ids.pop() for p, ids in self.seen.items() if ids}
        self.selection.fingerprints = [pinned.get(p, p) for p in self.selection.fingerprints]


async def dlq_left(backend: Backend, source: Address, stats: LoopStats) -> int | None:
    """How many messages the DLQ (or transfer DLQ) holds now; None when it cannot be counted."""
    try:
        counts = await retrying(lambda: backend.counts(source.entity), stats)
    except SbdlqError:
        return None
    return dlq_count(counts, source.sub_queue)


def report_unreceived(selected: int, missing: int, source: Address, note: Callable[[str], None]) -> None:
    """Say so when selected messages never came: another receiver took or holds them, or they went."""
    if missing > 0:
        note(
            f"note: {missing} of the {selected} selected message(s) were not received (taken by another "
            f"receiver, locked elsewhere, or gone); any still in {source} are untouched"
        )


def plan_limit(max_count: int | None, available: int) -> int:
    """How many messages a run may take: --max, bounded by what was there at the start."""
    bound = max(available, 0)
    return bound if max_count is None else min(max_count, bound)
