"""`sbdlq ui` in a real terminal (tmux): keys pressed as a person would, the screen read back.

The pilot tests (test_console.py) reach inside the app; these see only what a person sees,
so they catch what the pilot cannot: which widget has the keys on the first frame, whether
the dialogs' buttons are on the screen. Each asserts the broker's state where it matters.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import Seeder
from support.terminal import TMUX_MISSING, Terminal, have_tmux

pytest.importorskip("textual", reason="the ui extra is not installed: pip install 'sbdlq[ui]'")
pytestmark = pytest.mark.skipif(not have_tmux(), reason=TMUX_MISSING)


@pytest.fixture
def console(store: Path, tmp_path: Path) -> Iterator[list[Terminal]]:
    """Start terminals with `open_ui(...)`; every one is stopped after the test."""
    started: list[Terminal] = []
    yield started
    for term in started:
        term.close()


def open_ui(started: list[Terminal], store: Path, home: Path, *args: str, size: tuple[int, int] = (80, 24)) -> Terminal:
    term = Terminal(["--emulator", str(store), "ui", "--refresh", "1h", *args], home, size)
    started.append(term)
    return term


def test_q_quits_from_the_first_frame(store: Path, tmp_path: Path, dlqs: Seeder, console: list[Terminal]) -> None:
    term = open_ui(console, store, tmp_path)
    term.wait_for("orders", "billing", "q Quit")
    term.press("q")
    assert term.exit_status() == 0


def test_keys_work_at_once_and_slash_escape_enter_and_leave_the_filter(
    store: Path, tmp_path: Path, dlqs: Seeder, console: list[Terminal]
) -> None:
    term = open_ui(console, store, tmp_path)
    term.wait_for("3 of 3 entities, by DLQ size")
    term.press("s")  # sorts at once: nothing typed into the filter box
    term.wait_for("3 of 3 entities, by name")
    term.press("/")
    term.wait_for("3 of 3 entities", gone=("q Quit",))  # in the field, q is a letter
    term.type("bil")
    term.wait_for("1 of 3 entities")
    term.press("Escape")
    term.wait_for("q Quit")
    term.press("q")
    assert term.exit_status() == 0


def test_ctrl_q_quits_from_a_text_field(store: Path, tmp_path: Path, dlqs: Seeder, console: list[Terminal]) -> None:
    term = open_ui(console, store, tmp_path)
    term.wait_for("q Quit")
    term.press("/")
    term.wait_for("3 of 3 entities", gone=("q Quit",))
    term.type("q")
    term.press("C-q")
    assert term.exit_status() == 0


def test_in_a_dialog_q_is_typed_into_a_field_and_ctrl_q_quits(
    store: Path, tmp_path: Path, dlqs: Seeder, console: list[Terminal]
) -> None:
    term = open_ui(console, store, tmp_path, "orders")
    term.wait_for("5 shown")
    term.press("a", "d")
    term.wait_for("plan: delete 5", "type orders to delete with no export")
    term.type("q")  # the name field has the focus
    term.wait_for("plan: delete 5", gone=("type orders to delete with no export",))
    term.press("C-q")
    assert term.exit_status() == 0
    assert dlqs.counts("orders").dead_letter == 5


def test_a_d_enter_does_not_empty_a_dlq_the_typed_name_does(
    store: Path, tmp_path: Path, dlqs: Seeder, console: list[Terminal]
) -> None:
    term = open_ui(console, store, tmp_path, "orders")
    term.wait_for("5 shown")
    term.press("a")
    term.wait_for("all that match marked")
    term.press("d")
    term.wait_for("plan: delete 5", "Confirm", "Close")
    term.press("Enter")
    assert term.wait_for_any("type orders to delete", "purged 5") == "type orders to delete"
    assert dlqs.counts("orders").dead_letter == 5
    term.type("orders")
    term.press("Enter")
    # The result stays on screen: the first Enter, though read late on a loaded machine, saw no name.
    term.wait_for("purged 5 of 5")
    assert dlqs.counts("orders").dead_letter == 0


def test_deleting_marked_messages_defaults_to_close(
    store: Path, tmp_path: Path, dlqs: Seeder, console: list[Terminal]
) -> None:
    term = open_ui(console, store, tmp_path, "orders")
    term.wait_for("5 shown")
    term.press("Space")
    term.wait_for("1 marked")
    term.press("d")
    term.wait_for("plan: delete 1")
    term.press("Enter")  # the focused button: Close
    term.wait_for("1 marked", gone=("plan: delete 1",))
    assert dlqs.counts("orders").dead_letter == 5


@pytest.fixture
def crowded(seed: Seeder) -> Seeder:
    """A subscription's DLQ whose resubmit plan is long: forwarding warnings, then a refusal
    naming every other subscription that would take a copy (more than 24 lines with the form)."""
    seed.topic("other", "o")
    seed.topic("events", "audit")
    seed.dead_letter("events/Subscriptions/audit", 2)
    for i in range(4):
        seed.engine.create_subscription("events", f"forwarder-{i}", forward_to="other")
        seed.engine.create_subscription("events", f"billing-{i}")
    return seed


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_a_long_plan_scrolls_above_buttons_that_stay_in_view(
    store: Path, tmp_path: Path, crowded: Seeder, console: list[Terminal], size: tuple[int, int]
) -> None:
    term = open_ui(console, store, tmp_path, "events/Subscriptions/audit", size=size)
    term.wait_for("2 shown")
    term.press("a", "r")
    # The plan's end (the refusal's last way forward) and the buttons, on the screen at once.
    term.wait_for("refused: ", "consumer reads", "Only this subscription", "Accept fan-out", "Plan again", "Close")
    term.press("Escape")
    term.wait_for("2 shown", gone=("refused: ",))
    term.press("d")
    term.wait_for("plan: delete 2", "Confirm", "Plan again", "Close")
    assert crowded.counts("events/Subscriptions/audit").dead_letter == 2


def test_a_fan_out_refusal_offers_only_this_subscription_and_fan_out(
    store: Path, tmp_path: Path, fan_out: Seeder, console: list[Terminal], cli: Any
) -> None:
    code, _, err = cli("routing", "enable-targeted", "t", "--yes")
    assert code == 0, err
    term = open_ui(console, store, tmp_path, "t/Subscriptions/s1")
    term.wait_for("2 shown")
    term.press("a", "r")
    term.wait_for("refused: copies would also reach", "s2: 2 of 2", "Only this subscription", "Accept fan-out")
    term.press("Enter")  # Close has the focus: nothing moves
    term.wait_for("2 shown", gone=("refused: ",))
    assert fan_out.counts("t/Subscriptions/s1").dead_letter == 2
    term.press("Space", "r")  # f0 alone
    term.wait_for("s2: 1 of 1")
    term.press("BTab", "BTab", "BTab", "Enter")  # Close → Plan again → Accept fan-out → Only this subscription
    term.wait_for("routing: only this subscription", "plan: resubmit 1 message(s)")
    term.press("Enter")  # Confirm
    term.wait_for("resubmitted 1 of 1")
    term.press("Escape")
    term.wait_for("1 shown")
    term.press("a", "r")
    term.wait_for("s2: 1 of 1")
    term.press("BTab", "BTab", "Enter")  # Accept fan-out
    term.wait_for("routing: fan-out accepted", "plan: resubmit 1 message(s)")
    term.press("BTab", "BTab", "Enter")  # Close → Plan again → Confirm (the choices are hidden again)
    term.wait_for("resubmitted 1 of 1")
    targeted = fan_out.active("t/Subscriptions/s1")
    assert [m.message_id for m in targeted] == ["f0", "f1"]
    assert targeted[0].application_properties["sbdlq-target"] == "s1"
    assert "sbdlq-target" not in targeted[1].application_properties
    assert [m.message_id for m in fan_out.active("t/Subscriptions/s2")] == ["f1"]
    assert fan_out.counts("t/Subscriptions/s1").dead_letter == 0
