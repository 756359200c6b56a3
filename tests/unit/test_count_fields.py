"""The counts of an entity are declared once (`models.COUNT_FIELDS`): every view lists exactly those.

Counts' attributes and JSON shape, `count`'s table columns and Prometheus series, the table
renderer's numeric columns, the console's entities pane and its sort by DLQ size, `emulator
list`'s columns and JSON, and the ATOM API's MessageCount each read the declaration; a count
added there (and to Counts) appears in all of them, and none keeps a list of its own.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from sbdlq.cli.count_views import COLUMNS
from sbdlq.emulator.admin import LIST_COLUMNS, EntityRow
from sbdlq.emulator.amqp.atom import Site, entry
from sbdlq.models import COUNT_FIELDS, COUNT_NAMES, Counts, EntityInfo
from sbdlq.output.prometheus import exposition, gauges
from sbdlq.output.render import NUMERIC_COLUMNS

NAMES = [f.name for f in COUNT_FIELDS]
SAMPLE = Counts("orders", active=1, dead_letter=2, transfer_dead_letter=3, scheduled=4)


def test_counts_holds_one_attribute_per_declared_count() -> None:
    assert [f.name for f in fields(Counts)] == ["entity", *NAMES]
    assert list(COUNT_NAMES) == NAMES


def test_the_json_shape_is_the_entity_then_every_count() -> None:
    assert SAMPLE.to_json() == {
        "entity": "orders",
        "active": 1,
        "dead_letter": 2,
        "transfer_dead_letter": 3,
        "scheduled": 4,
    }
    assert list(SAMPLE.to_json()) == ["entity", *NAMES]


def test_the_count_table_shows_every_count_as_a_number() -> None:
    assert list(COLUMNS) == ["entity", *NAMES]
    assert set(NAMES) <= NUMERIC_COLUMNS


def test_prometheus_writes_one_series_per_count() -> None:
    series = [line for line in exposition(gauges([SAMPLE])).splitlines() if not line.startswith("#")]
    assert series == [f'sbdlq_messages{{entity="orders",queue="{name}"}} {getattr(SAMPLE, name)}' for name in NAMES]


def test_the_console_shows_every_count_dead_letter_queues_first() -> None:
    pytest.importorskip("textual")
    from sbdlq.ui.entities_pane import EntitiesPane

    keys = [column.key for column in EntitiesPane.COLUMNS]
    assert keys == ["entity", "dead_letter", "transfer_dead_letter", "active", "scheduled"]
    assert sorted(keys[1:]) == sorted(NAMES)
    titles = {column.key: column.title for column in EntitiesPane.COLUMNS}
    assert {f.name: f.console_title for f in COUNT_FIELDS} == {name: titles[name] for name in NAMES}


def test_emulator_list_shows_every_count_between_the_kind_and_the_subscriptions() -> None:
    assert list(LIST_COLUMNS) == ["entity", "kind", *NAMES, "subscriptions"]
    row = EntityRow("orders", "queue", SAMPLE, None).to_json()
    assert row == {"entity": "orders", "kind": "queue", **SAMPLE.to_json(), "subscriptions": None}
    assert list(row) == list(LIST_COLUMNS)
    topic = EntityRow("events", "topic", None, 2).to_json()
    assert topic == {"entity": "events", "kind": "topic", **dict.fromkeys(NAMES), "subscriptions": 2}


def test_the_atom_message_count_is_every_count_added() -> None:
    xml = entry(EntityInfo("orders", "queue"), SAMPLE, Site("http://localhost"))
    total = sum(getattr(SAMPLE, name) for name in NAMES)
    assert total == 10 and f"<MessageCount>{total}</MessageCount>" in xml


def test_the_console_sorts_by_every_dead_letter_count_in_declaration_order() -> None:
    pytest.importorskip("textual")
    from sbdlq.ui.entities_pane import by_dlq_size

    rows = [
        Counts("b", transfer_dead_letter=9),
        Counts("c", dead_letter=1, transfer_dead_letter=1),
        Counts("A", dead_letter=1, transfer_dead_letter=1),
        Counts("d", dead_letter=2, active=50),
    ]
    assert [c.entity for c in sorted(rows, key=by_dlq_size)] == ["d", "A", "c", "b"]
