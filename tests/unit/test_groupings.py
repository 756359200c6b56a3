"""`inspect-reason --by`'s groupings are declared once (`operations/browse.py` `GROUPINGS`): its
completion and its refusal read them, and its help, written by hand, lists the same in order."""

from __future__ import annotations

import re

import pytest
import typer

from sbdlq.cli.completion import complete_group_by
from sbdlq.cli.main import app
from sbdlq.errors import BadInput
from sbdlq.operations.browse import GROUPINGS, grouping_words, is_time_grouping

WORDS = ["reason", "description", "fingerprint", "source", "subject", "property:NAME", "hour", "day", "entity"]


def test_the_groupings_as_typed() -> None:
    assert grouping_words() == WORDS
    assert [w.partition(":")[0] for w in WORDS] == list(GROUPINGS)


def test_completion_offers_every_grouping_and_property_up_to_its_name() -> None:
    ctx = typer.Context(typer.main.get_command(app))
    assert complete_group_by(ctx, "") == [w.replace("NAME", "") for w in WORDS]
    assert complete_group_by(ctx, "PRO") == ["property:"]


def test_a_grouping_outside_the_list_is_refused_naming_every_one() -> None:
    with pytest.raises(BadInput) as refused:
        is_time_grouping("weekday")
    assert refused.value.hint == "use " + ", ".join(WORDS[:-1]) + " or entity"
    with pytest.raises(BadInput):
        is_time_grouping("property")  # a named grouping needs its name
    assert is_time_grouping("Hour") and not is_time_grouping("property:hour")


def test_the_by_help_lists_the_groupings_in_order() -> None:
    # Written by hand: the help of a DLQ command must not import the operations.
    root = typer.main.get_command(app)
    command = root.commands["inspect-reason"]  # type: ignore[attr-defined]
    (by,) = [p for p in command.params if p.name == "by"]
    listed = re.sub(r" \([^)]*\)", "", by.help).rstrip(".")
    assert re.split(r", | or ", listed) == WORDS
