"""Fingerprints on every backend: the same ids through the engine and the SDK; `--fingerprint` selects a group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from support import ids
from support.fingerprint_corpus import CAUSES, generate

from sbdlq.addresses import Address, EntityPath, SubQueue
from sbdlq.backends.base import Backend
from sbdlq.fingerprint import fingerprint
from sbdlq.operations.browse import inspect_reasons, iter_messages
from sbdlq.operations.namespace import inspect_namespace
from sbdlq.operations.purge import purge
from sbdlq.operations.resubmit import resubmit
from sbdlq.selection import build_selection

if TYPE_CHECKING:
    from support import Seeder

Q = EntityPath("q")
DLQ = Address(Q, SubQueue.DEAD_LETTER)
PER_CAUSE = 4
#: every cause of the corpus, PER_CAUSE messages each, in the corpus's interleaved order
RECORDS = generate(per_cause=PER_CAUSE)


@pytest.fixture
def corpus(seed: Seeder) -> dict[str, list[str]]:
    """q's DLQ holds the records, one message each (message id `m<index>`); cause → message ids."""
    seed.queue("q")
    by_cause: dict[str, list[str]] = {}
    for i, rec in enumerate(RECORDS):
        seed.dead_letter("q", 1, rec["reason"], rec["description"], prefix=f"m{i}-")
        by_cause.setdefault(rec["cause"], []).append(f"m{i}-0")
    return by_cause


def expected_id(cause: str) -> str:
    rec = next(r for r in RECORDS if r["cause"] == cause)
    return fingerprint(rec["reason"], rec["description"]).id


def test_the_ids_are_those_computed_here_on_every_backend(backend: Backend, corpus: Any, aio: Any) -> None:
    # The SDK hands the description back through AMQP: the id must not see the trip.
    groups = aio(inspect_reasons(backend, DLQ, by="fingerprint"))
    assert sorted((g.key, g.count) for g in groups) == sorted((expected_id(c.name), PER_CAUSE) for c in CAUSES)
    assert {g.template for g in groups} >= {"Order <num> not found in store <id>"}


def test_the_namespace_groups_carry_the_same_ids(backend: Backend, corpus: Any, seed: Seeder, aio: Any) -> None:
    seed.queue("other")
    rec = next(r for r in RECORDS if r["cause"] == "order-not-found")
    seed.dead_letter("other", 1, rec["reason"], rec["description"], prefix="o")
    groups = aio(inspect_namespace(backend, SubQueue.DEAD_LETTER, by="fingerprint"))
    top = groups[0]
    assert (top.key, top.count, top.entities) == (expected_id("order-not-found"), PER_CAUSE + 1, {"q", "other"})


def test_a_fingerprint_selects_exactly_its_group(backend: Backend, corpus: dict[str, list[str]], aio: Any) -> None:
    wanted = expected_id("dotnet-http-503")
    got = aio(_collect(iter_messages(backend, DLQ, selection=build_selection(fingerprints=[wanted]))))
    assert ids(got) == corpus["dotnet-http-503"]
    # a prefix of 4 and an id in upper case take the same
    got = aio(_collect(iter_messages(backend, DLQ, selection=build_selection(fingerprints=[wanted[:4].upper()]))))
    assert set(ids(got)) >= set(corpus["dotnet-http-503"])


def test_resubmit_and_purge_take_exactly_the_group(
    backend: Backend, corpus: dict[str, list[str]], seed: Seeder, aio: Any
) -> None:
    seed.queue("target")
    sel = build_selection(fingerprints=[expected_id("order-not-found"), expected_id("node-json")])
    r = aio(resubmit(backend, DLQ, EntityPath("target"), selection=sel, batch_size=3))
    moved = sorted(corpus["order-not-found"] + corpus["node-json"])
    assert r.resubmitted == 2 * PER_CAUSE
    assert sorted(ids(seed.active("target"))) == moved  # one copy each, nothing else
    left = set(seed.dlq_ids("q"))
    assert not left & set(moved) and len(left) == len(RECORDS) - 2 * PER_CAUSE
    p = aio(purge(backend, DLQ, selection=build_selection(fingerprints=[expected_id("quota")])))
    assert p.purged == PER_CAUSE
    assert not set(seed.dlq_ids("q")) & set(corpus["quota"])


async def _collect(it: Any) -> list[Any]:
    return [m async for m in it]
