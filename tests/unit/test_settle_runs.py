"""links.runs_of: how a complete of many is cut into runs of consecutive deliveries per receiver."""

from __future__ import annotations

from sbdlq.backends.servicebus.links import Link, runs_of


def test_consecutive_ids_of_one_link_make_a_run_in_id_order() -> None:
    a, b = Link("a", None), Link("b", None)
    items = [("m7", a, 7), ("m5", a, 5), ("m6", a, 6), ("x1", b, 1), ("x2", b, 2), ("m9", a, 9)]
    singles, runs = runs_of(items)
    assert sorted((link.key, run) for link, run in runs) == [("a", ["m5", "m6", "m7"]), ("b", ["x1", "x2"])]
    assert singles == ["m9"]  # alone after a gap: settled one by one


def test_what_cannot_join_a_run_is_settled_alone() -> None:
    a = Link("a", None)
    singles, runs = runs_of([("p", None, None), ("q", a, None), ("r", a, 3)])
    assert sorted(singles) == ["p", "q", "r"]
    assert runs == []


def test_a_gap_splits_a_run() -> None:
    a = Link("a", None)
    singles, runs = runs_of([(f"m{i}", a, i) for i in (1, 2, 4, 5, 6)])
    assert [run for _, run in runs] == [["m1", "m2"], ["m4", "m5", "m6"]]
    assert singles == []
