"""inspect-reason over the whole namespace, on every backend: one pass, grouped per entity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from support.spy import Spy

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput
from sbdlq.models import Message
from sbdlq.operations.namespace import inspect_namespace, nonempty_dlqs
from sbdlq.selection import build_selection

if TYPE_CHECKING:
    from support import Seeder


class PeekLog(Spy):
    """A spy that also records which queue each peek read."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.peeked: list[str] = []

    async def peek(self, address: Address, from_sequence: int, max_count: int) -> list[Message]:
        self.peeked.append(str(address))
        return await super().peek(address, from_sequence, max_count)


@pytest.fixture
def namespace(seed: Seeder) -> None:
    """q: 3 Timeout + 1 Poison; t/s1: 2 Poison (t/s2 gets the copies, active); empty: nothing."""
    seed.queue("q")
    seed.queue("empty")
    seed.topic("t", "s1", "s2")
    seed.dead_letter("q", 3, reason="Timeout", prefix="a")
    seed.dead_letter("q", 1, reason="Poison", prefix="b")
    seed.dead_letter("t/Subscriptions/s1", 2, reason="Poison", prefix="c")


def rows(groups: list[Any]) -> list[tuple[str, str, int]]:
    return [(g.entity, g.key, g.count) for g in groups]


def test_every_dlq_grouped_per_entity_biggest_first(backend: Backend, namespace: None, aio: Any) -> None:
    groups = aio(inspect_namespace(backend, SubQueue.DEAD_LETTER))
    assert rows(groups) == [("q", "Timeout", 3), ("t/Subscriptions/s1", "Poison", 2), ("q", "Poison", 1)]
    assert groups[0].to_json()["entity"] == "q"
    assert groups[0].sample_sequence_numbers == [1, 2, 3]


def test_by_entity_is_one_row_per_dlq(backend: Backend, namespace: None, aio: Any) -> None:
    groups = aio(inspect_namespace(backend, SubQueue.DEAD_LETTER, by="entity"))
    assert rows(groups) == [("q", "q", 4), ("t/Subscriptions/s1", "t/Subscriptions/s1", 2)]


def test_selection_applies_in_every_dlq(backend: Backend, namespace: None, aio: Any) -> None:
    sel = build_selection(reasons=["poison"])
    groups = aio(inspect_namespace(backend, SubQueue.DEAD_LETTER, selection=sel))
    assert rows(groups) == [("t/Subscriptions/s1", "Poison", 2), ("q", "Poison", 1)]


def test_empty_dlqs_are_counted_not_scanned(backend: Backend, namespace: None, aio: Any) -> None:
    spy = PeekLog(backend)
    pages: list[int] = []
    total: list[int] = []

    def progress(n: int) -> Any:
        total.append(n)
        return pages.append

    aio(inspect_namespace(spy, SubQueue.DEAD_LETTER, progress=progress))
    assert sorted(set(spy.peeked)) == ["q/$DeadLetterQueue", "t/Subscriptions/s1/$DeadLetterQueue"]
    # The bar's total is the sum of the counts; the pages add up to it.
    assert (total, sum(pages)) == ([6], 6)


def test_nonempty_dlqs_of_the_transfer_dlq(backend: Backend, seed: Seeder, namespace: None, aio: Any) -> None:
    seed.transfer_dead_letter("fwd", 2)
    assert aio(nonempty_dlqs(backend, SubQueue.TRANSFER_DEAD_LETTER)) == [(EntityPath("fwd"), 2)]
    groups = aio(inspect_namespace(backend, SubQueue.TRANSFER_DEAD_LETTER))
    assert [(g.entity, g.count) for g in groups] == [("fwd", 2)]


def test_an_empty_namespace_and_a_bad_grouping(backend: Backend, seed: Seeder, aio: Any) -> None:
    seed.queue("q")
    assert aio(inspect_namespace(backend, SubQueue.DEAD_LETTER)) == []
    with pytest.raises(BadInput):
        aio(inspect_namespace(backend, SubQueue.DEAD_LETTER, by="colour"))


def test_watch_sees_each_snapshot_of_the_broker(backend: Backend, seed: Seeder, aio: Any) -> None:
    from sbdlq.operations.browse import count_entities
    from sbdlq.operations.watch import every

    seed.queue("q")
    seen: list[int] = []
    slept: list[float] = []

    async def no_sleep(seconds: float) -> None:
        slept.append(seconds)

    def show(at: Any, counts: list[Any]) -> bool:
        seen.append(counts[0].dead_letter)
        if len(seen) < 3:
            seed.dead_letter("q", 2, prefix=f"w{len(seen)}")
        return len(seen) == 3

    aio(every(5, lambda: count_entities(backend, [EntityPath("q")]), show, sleep=no_sleep))
    assert seen == [0, 2, 4]
    assert len(slept) == 2


class _DeletesAfterListing(Spy):
    """Entities come and go: one queue is deleted right after the namespace was listed."""

    def __init__(self, inner: Backend, engine: Any, doomed: str) -> None:
        super().__init__(inner)
        self._engine, self._doomed = engine, doomed

    async def list_entities(self) -> Any:
        listed = await super().list_entities()
        self._engine.delete_entity(self._doomed)
        return listed


def test_an_entity_deleted_while_the_namespace_is_counted_is_left_out_with_a_note(
    backend: Backend, seed: Seeder, engine: Any, aio: Any
) -> None:
    from sbdlq.operations.browse import count_entities

    seed.queue("stays")
    seed.queue("goes")
    seed.dead_letter("stays", 2)
    notes: list[str] = []
    counts = aio(count_entities(_DeletesAfterListing(backend, engine, "goes"), None, note=notes.append))
    assert [(c.entity, c.dead_letter) for c in counts] == [("stays", 2)]
    assert notes == ["note: goes was deleted while the namespace was counted; left out"]
