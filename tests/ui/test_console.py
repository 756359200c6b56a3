"""`sbdlq ui` driven through Textual's pilot on the emulator backend.

Each test asserts what the broker holds afterwards (the store, read through the engine),
not only what the screen shows.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from support import Seeder

pytest.importorskip("textual", reason="the ui extra is not installed: pip install 'sbdlq[ui]'")

from textual import events
from textual.widgets import Button, Checkbox, DataTable, Input, Static, TabbedContent

from sbdlq.addresses import Address, SubQueue, parse_entity
from sbdlq.backends.emulator import EmulatorBackend
from sbdlq.models import OutboundMessage
from sbdlq.ui.app import FOCUS, DlqApp
from sbdlq.ui.detail_pane import DetailPane
from sbdlq.ui.entities_pane import EntitiesPane
from sbdlq.ui.messages_pane import MessagesPane
from sbdlq.ui.screens import ActionScreen

SIZE = (80, 24)


def drive(
    store: Path,
    script: Callable[[DlqApp, Any], Awaitable[None]],
    size: tuple[int, int] = SIZE,
    **app_options: Any,
) -> None:
    """Run the app at `size` (80×24) over the store and play `script(app, pilot)`."""

    async def go() -> None:
        app = DlqApp(EmulatorBackend(str(store)), refresh_s=3600, **app_options)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await script(app, pilot)

    asyncio.run(go())


async def settle(app: DlqApp, pilot: Any) -> None:
    """Let workers and every queued message finish, and the messages those set off in turn.

    Each round waits until every widget has handled what was queued to it when the round began
    (Textual's own wait). A key climbs from the focused widget to the app one widget a round, so
    there are as many rounds as the tree is deep. No idle-CPU guess: on a loaded machine that
    guess says "idle" while a key is still on its way.
    """
    rounds = max(len(node.ancestors_with_self) for node in app.screen.walk_children(with_self=True)) + 2
    for _ in range(rounds):
        await app.workers.wait_for_complete()
        await pilot._wait_for_screen()


async def press(app: DlqApp, pilot: Any, *keys: str) -> None:
    """Press keys as a person does: each one handled, and what it set off, before the next.

    Pilot's own `press` sends the next key once the CPU looks idle. On a loaded machine a key then
    overtakes one still climbing to the app: a letter lands in the table before `/` has focused
    the filter, or `a` in the filter before Enter has left it.
    """
    for key in keys:
        await pilot.press(key)
        await settle(app, pilot)


async def until(app: DlqApp, pilot: Any, check: Callable[[], bool], what: str, *, held: bool = False) -> None:
    """Let the app work until `check()` holds: a generous deadline, never a speed assertion.

    `held`: a handler waits at a gate the test holds, so only sleep between checks (settling
    would wait for that handler).
    """
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"no {what} within 30 s; the console then: {state(app)}"
        await (asyncio.sleep(0.01) if held else settle(app, pilot))


def state(app: DlqApp) -> dict[str, Any]:
    """What a failed wait reports: the screen, the focus, the filters, the tables' sizes and the panes' lines."""
    screen = app.screen
    if isinstance(screen, ActionScreen):
        return {"screen": "action", "focused": getattr(app.focused, "id", None), "plan": text(screen, "#plan")}
    return {
        "screen": type(screen).__name__,
        "focused": getattr(app.focused, "id", None),
        "entity filter": app.query_one("#entity-filter", Input).value,
        "entities": [r["entity"] for r in rows(app, "#entities")],
        "messages title": text(app, "#messages-title"),
        "messages status": text(app, "#messages-status"),
        "notifications": [n.message for n in app._notifications],
    }


def rows(app: DlqApp, table_id: str) -> list[dict[str, Any]]:
    """The table's rows as shown, each by column key (the pane's column declaration names them)."""
    table = app.query_one(table_id, DataTable)
    keys = [str(key.value) for key in table.columns]
    return [dict(zip(keys, table.get_row_at(i), strict=True)) for i in range(table.row_count)]


def text(app: Any, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


async def open_orders(app: DlqApp, pilot: Any) -> None:
    """Open orders' DLQ from the Entities pane and wait until its first page is shown."""
    await press(app, pilot, "slash", *"orders", "enter")
    await until(
        app,
        pilot,
        lambda: (
            getattr(app.focused, "id", None) == "entities"
            and [r["entity"] for r in rows(app, "#entities")] == ["orders"]
        ),
        "the filtered entities",
    )
    await press(app, pilot, "enter")
    await until(
        app,
        pilot,
        # The Messages table has the keys (the Entities pane's Enter was handled), and its page is shown.
        lambda: (
            getattr(app.focused, "id", None) == "messages"
            and text(app, "#messages-title").startswith("orders/")
            and "shown" in text(app, "#messages-status")
        ),
        "orders' first page",
    )


async def filter_messages(app: DlqApp, pilot: Any, line: str, shown: list[str]) -> None:
    """Type a filter line in the Messages pane and wait until its page shows `shown` (message ids)."""
    await press(app, pilot, "slash", *line, "enter")
    await until(app, pilot, lambda: [r["message_id"] for r in rows(app, "#messages")] == shown, f"the page of {line}")


def test_entities_sorted_by_dlq_size_and_filtered_as_you_type(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        assert [r["entity"] for r in rows(app, "#entities")] == ["orders", "billing", "empty"]
        assert rows(app, "#entities")[0] == {
            "entity": "orders",
            "dead_letter": 5,
            "transfer_dead_letter": 0,
            "active": 0,
            "scheduled": 0,
        }
        await press(app, pilot, "slash", "b", "i", "l")
        assert [r["entity"] for r in rows(app, "#entities")] == ["billing"]
        await press(app, pilot, "enter", "s")
        assert app.query_one(EntitiesPane).by_size is False

    drive(store, script)


def test_switching_panes_moves_the_focus_before_the_pane_left_is_hidden(store: Path, dlqs: Seeder) -> None:
    """The pane left must not hold the focus when it is hidden: Textual hands it to a neighbour in
    the hidden pane (its filter), whose tab then becomes the active one again. On a loaded machine,
    where the pane's Hide came before a deferred focus, opening a DLQ left the focus in its filter."""

    async def script(app: DlqApp, pilot: Any) -> None:
        tabs = app.query_one(TabbedContent)
        for pane in ("messages", "detail", "reasons", "entities", "messages"):
            app.action_show(pane)
            assert app.focused is app.query_one(FOCUS[pane]), f"{pane}: the focus moved only later"
            await settle(app, pilot)
            assert app.focused is app.query_one(FOCUS[pane]) and tabs.active == f"{pane}-tab"

    drive(store, script)


def test_keys_work_from_the_first_frame_and_slash_escape_enter_and_leave_the_filter(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        box = app.query_one("#entity-filter", Input)
        assert not box.has_focus
        await press(app, pilot, "s")  # an app key, not a letter in the filter
        assert app.query_one(EntitiesPane).by_size is False and box.value == ""
        await press(app, pilot, "question_mark")
        await pilot.pause()
        assert "sbdlq ui — keys" in str(app.screen.query_one(Static).render())
        await press(app, pilot, "escape")
        await press(app, pilot, "slash", *"sq")  # in the field, q and s are typed
        assert box.has_focus and box.value == "sq" and app.is_running
        await press(app, pilot, "escape")
        assert app.query_one("#entities", DataTable).has_focus
        await press(app, pilot, "q")
        await pilot.pause()
        assert not app.is_running

    drive(store, script)


def test_q_quits_from_the_help_and_from_a_dialog(store: Path, dlqs: Seeder) -> None:
    async def from_help(app: DlqApp, pilot: Any) -> None:
        await press(app, pilot, "question_mark", "q")
        await pilot.pause()
        assert not app.is_running

    async def from_a_dialog(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        await open_action(app, pilot, "space", "d")
        await press(app, pilot, "q")
        await pilot.pause()
        assert not app.is_running

    drive(store, from_help)
    drive(store, from_a_dialog)
    assert dlqs.counts("orders").dead_letter == 5


def test_browse_pages_and_detail(store: Path, seed: Seeder) -> None:
    seed.queue("orders")
    body = json.dumps({"order": 7, "lines": [1, 2]}).encode()
    seed.dead_letter("orders", messages=[OutboundMessage(body=body, message_id="json-1", subject="s1")])
    seed.dead_letter("orders", messages=[OutboundMessage(body=bytes(range(250, 256)), message_id="bin-1")])
    seed.dead_letter("orders", 5, prefix="x")

    async def script(app: DlqApp, pilot: Any) -> None:
        pane = app.query_one(MessagesPane)
        pane.page_rows = 3  # small pages: paging without 100+ messages
        await open_orders(app, pilot)
        assert [r["message_id"] for r in rows(app, "#messages")] == ["json-1", "bin-1", "x0"]
        assert "n: next page" in text(app, "#messages-status")
        await press(app, pilot, "n")
        assert [r["message_id"] for r in rows(app, "#messages")] == ["x1", "x2", "x3"]
        await press(app, pilot, "n")
        assert [r["message_id"] for r in rows(app, "#messages")] == ["x4"]
        assert "last page" in text(app, "#messages-status")
        await press(app, pilot, "p", "p")
        assert [r["message_id"] for r in rows(app, "#messages")] == ["json-1", "bin-1", "x0"]
        await press(app, pilot, "enter")
        detail = text(app, "#detail-text")
        assert '"order": 7' in detail and "message_id: json-1" in detail and "subject: s1" in detail
        assert "DeadLetterReason: Bad" in detail
        await press(app, pilot, "2", "down", "enter")
        assert "fa fb fc fd fe ff" in text(app, "#detail-text")
        app.query_one(DetailPane).focus()
        await press(app, pilot, "b")
        assert "+vv8/f7/" in text(app, "#detail-text")

    drive(store, script)


def test_a_column_is_one_declaration(store: Path, dlqs: Seeder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a message field to the Messages table is one entry: title, header and cells follow."""
    from sbdlq.ui.messages_pane import MESSAGE_COLUMNS, field_column

    monkeypatch.setattr(MessagesPane, "COLUMNS", (*MESSAGE_COLUMNS, field_column("delivery_count")))

    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        table = app.query_one("#messages", DataTable)
        assert [str(c.label) for c in table.columns.values()][-2:] == ["subject", "deliveries"]
        shown = rows(app, "#messages")
        assert [(r["message_id"], r["delivery_count"]) for r in shown][:2] == [("t0", 1), ("t1", 1)]
        assert shown[0]["dead_letter_reason"] == "Timeout"

    drive(store, script)


def test_the_detail_shows_every_message_field() -> None:
    from datetime import UTC, datetime

    from sbdlq.models import MESSAGE_FIELDS, Message
    from sbdlq.ui.detail_pane import describe

    m = Message(1, b"{}", datetime(2025, 1, 1, tzinfo=UTC), message_id="m-1", application_properties={"k": "v"})
    shown = describe(m).plain
    assert [f.name for f in MESSAGE_FIELDS if f"  {f.name}: " not in shown] == []
    assert "enqueued_time: 2025-01-01T00:00:00Z" in shown and "k: v" in shown


def test_filter_mark_and_resubmit_moves_only_the_marked(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        await filter_messages(app, pilot, "--reason Timeout", ["t0", "t1", "t2"])
        await press(app, pilot, "space", "down", "space")  # t0 and t2
        assert "2 marked" in text(app, "#messages-status")
        screen = await open_action(app, pilot, "r")
        assert "plan: resubmit 2 message(s) from orders/$DeadLetterQueue to orders" in text(screen, "#plan")
        await pilot.click("#confirm")
        await until(app, pilot, lambda: "resubmitted 2 of 2" in text(screen, "#result"), "resubmitted 2 of 2")
        await pilot.click("#close")
        await until(
            app, pilot, lambda: [r["message_id"] for r in rows(app, "#messages")] == ["t1"], "the page after the action"
        )

    drive(store, script)
    assert sorted(dlqs.peek_ids("orders")) == ["t0", "t2"]
    assert sorted(dlqs.dlq_ids("orders")) == ["p0", "p1", "t1"]  # type: ignore[type-var]


def test_purge_all_that_match_with_export(store: Path, dlqs: Seeder, tmp_path: Path) -> None:
    export = tmp_path / "poison.jsonl"

    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        await filter_messages(app, pilot, "--where \"DeadLetterReason = 'Poison'\"", ["p0", "p1"])
        await press(app, pilot, "a")
        assert "all that match marked" in text(app, "#messages-status")
        screen = await open_action(app, pilot, "d")
        assert "plan: delete 2" in text(screen, "#plan")
        assert screen.query_one("#confirm", Button).disabled  # no export: only the typed name confirms
        await press(app, pilot, *"ord")  # half a name, then the operator chooses to export instead
        screen.query_one("#export", Input).value = str(export)
        await pilot.click("#replan")
        await until(
            app, pilot, lambda: "plan: export and delete 2" in text(screen, "#plan"), "plan: export and delete 2"
        )
        assert not screen.query_one("#confirm", Button).disabled
        assert not screen.query_one("#confirm-name", Input).display
        assert dlqs.counts("orders").dead_letter == 5
        await press(app, pilot, "enter")  # Confirm has the focus once a plan may go
        await until(
            app,
            pilot,
            lambda: "purged 2 of 2 selected message(s)" in text(screen, "#result"),
            "purged 2 of 2 selected message(s)",
        )
        assert "2 exported" in text(screen, "#result")
        await press(app, pilot, "escape")
        await settle(app, pilot)

    drive(store, script)
    assert sorted(dlqs.dlq_ids("orders")) == ["t0", "t1", "t2"]  # type: ignore[type-var]
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert [d["message_id"] for d in lines] == ["p0", "p1"]


def test_purging_all_that_match_with_no_export_needs_the_name_typed(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, "a", "d")
        assert "plan: delete 5" in text(screen, "#plan")
        assert screen.query_one("#confirm", Button).disabled
        await press(app, pilot, "enter")  # what deleted the whole DLQ before
        await settle(app, pilot)
        assert text(screen, "#result") == ""
        await press(app, pilot, *"order", "enter")  # not quite the name
        await settle(app, pilot)
        assert screen.query_one("#confirm", Button).disabled and text(screen, "#result") == ""
        assert dlqs.counts("orders").dead_letter == 5
        await press(app, pilot, "s", "enter")  # `orders`
        await until(app, pilot, lambda: "purged 5 of 5" in text(screen, "#result"), "purged 5 of 5")

    drive(store, script)
    assert dlqs.counts("orders").dead_letter == 0


REFUSED_NAME = "type orders to delete these messages with no export"


def test_keys_typed_ahead_act_in_order_on_the_typed_name(store: Path, dlqs: Seeder) -> None:
    """Enter, the name, Enter, all typed before the console reads any of them (a terminal's typeahead):
    the first Enter is refused (no name yet), the second deletes, and the result stays on screen."""

    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, "a", "d")
        assert "plan: delete 5" in text(screen, "#plan")
        keys = [("enter", "\r"), *((c, c) for c in "orders"), ("enter", "\r")]
        for key, character in keys:  # straight into the app's queue, as a pty delivers a burst
            app.post_message(events.Key(key, character))
        await until(app, pilot, lambda: "purged 5 of 5" in text(screen, "#result"), "purged 5 of 5")
        await settle(app, pilot)
        # The first Enter saw no name: refused. (Textual runs an Input's Enter binding only once the
        # key has bubbled up to the app, by when the name typed after it could be in the field.)
        assert [n.message for n in app._notifications] == [REFUSED_NAME]
        assert app.screen is screen, "a typed-ahead Enter closed the result"
        assert screen.query_one("#close", Button).has_focus

    drive(store, script)
    assert dlqs.counts("orders").dead_letter == 0


def test_purging_marked_messages_with_no_export_has_close_as_the_default(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, "space", "d")
        assert "plan: delete 1" in text(screen, "#plan")
        assert screen.query_one("#close", Button).has_focus
        await press(app, pilot, "enter")
        await until(app, pilot, lambda: not isinstance(app.screen, ActionScreen), "the dialog closed")

    drive(store, script)
    assert dlqs.counts("orders").dead_letter == 5


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@pytest.mark.parametrize("keys", [("a", "r"), ("a", "d"), ("space", "e")])
def test_every_dialog_shows_its_buttons(
    store: Path, tenants: Seeder, size: tuple[int, int], keys: tuple[str, ...]
) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, *keys)
        if keys[-1] == "r":  # the longest plan: the edit example
            screen.query_one("#set-property", Input).value = "tenant=eu, region=west, tier=gold"
            screen.query_one("#remove-property", Input).value = "bad, keep"
            screen.query_one("#set-subject", Input).value = "fixed"
            screen.query_one("#set-correlation_id", Input).value = "c-1"
            await pilot.click("#replan")
            await until(app, pilot, lambda: "example: the copy" in text(screen, "#plan"), "example: the copy")
        for button in screen.query(Button):
            if not button.display:  # the fan-out choices, shown only after a fan-out refusal
                continue
            x, y = button.region.center
            assert screen.get_widget_at(x, y)[0] is button, f"{button.id} is out of sight at {size}"
        await press(app, pilot, "escape")
        await press(app, pilot, "question_mark")
        await pilot.pause()
        assert app.screen.query_one("#help").region.bottom <= size[1]

    drive(store, script, size=size)


def test_export_writes_jsonl_and_deletes_nothing(store: Path, dlqs: Seeder, tmp_path: Path) -> None:
    export = tmp_path / "all.jsonl"

    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, "a", "e")
        assert "refused: export needs a file path" in text(screen, "#plan")
        screen.query_one("#export", Input).value = str(export)
        await pilot.click("#replan")
        await settle(app, pilot)
        await pilot.click("#confirm")
        await until(app, pilot, lambda: "exported 5 of 5" in text(screen, "#result"), "exported 5 of 5")

    drive(store, script)
    assert len(export.read_text().splitlines()) == 5
    assert dlqs.counts("orders").dead_letter == 5


def test_a_refused_resubmit_moves_nothing(store: Path, seed: Seeder) -> None:
    seed.queue("orders", requires_duplicate_detection=True)
    seed.dead_letter("orders", 2)

    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, "a", "r")
        assert "refused: " in text(screen, "#plan") and "duplicate detection" in text(screen, "#plan")
        assert screen.query_one("#confirm", Button).disabled
        await pilot.click("#confirm")
        await settle(app, pilot)
        assert text(screen, "#result") == ""
        # The operator fixes it the way the refusal says: new message ids.
        screen.query_one("#new-message-id", Checkbox).value = True
        await until(app, pilot, lambda: "plan: resubmit 2" in text(screen, "#plan"), "plan: resubmit 2")
        await press(app, pilot, "escape")  # and then changes their mind
        await settle(app, pilot)

    drive(store, script)
    assert seed.counts("orders").dead_letter == 2 and seed.counts("orders").active == 0


@pytest.fixture
def tenants(seed: Seeder) -> Seeder:
    """orders: two dead-lettered messages carrying tenant=us and a bad property."""
    seed.queue("orders")
    props = {"tenant": "us", "bad": "x", "keep": 1}
    messages = [OutboundMessage(body=b"{}", message_id=f"m{i}", application_properties=dict(props)) for i in range(2)]
    seed.dead_letter("orders", messages=messages)
    return seed


def test_resubmit_with_edits_shows_the_copy_then_sends_it_edited(store: Path, tenants: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        await press(app, pilot, "space")  # m0 only
        screen = await open_action(app, pilot, "r")
        screen.query_one("#set-property", Input).value = "tenant=eu"
        screen.query_one("#remove-property", Input).value = "bad"
        screen.query_one("#set-subject", Input).focus()
        await press(app, pilot, *"fixed", "enter")  # Enter in a field plans again
        await settle(app, pilot)
        shown = text(screen, "#plan")
        assert "plan: resubmit 1 message(s)" in shown
        assert "example: the copy of sequence number" in shown
        assert 'property tenant: "us" → "eu"' in shown
        assert 'property bad: "x" → (absent)' in shown
        assert 'subject: (none) → "fixed"' in shown
        assert not screen.query_one("#confirm", Button).disabled
        # The example (with the copy's sbdlq-attempt row) is taller than 24 lines leave for it.
        screen.query_one("#confirm", Button).scroll_visible(animate=False)
        await settle(app, pilot)
        await pilot.click("#confirm")
        await until(app, pilot, lambda: "resubmitted 1 of 1" in text(screen, "#result"), "resubmitted 1 of 1")

    drive(store, script)
    copies = tenants.active("orders")
    assert [m.message_id for m in copies] == ["m0"]
    props = copies[0].application_properties
    assert props["tenant"] == "eu" and "bad" not in props and props["keep"] == 1
    assert copies[0].subject == "fixed"
    assert tenants.dlq_ids("orders") == ["m1"]


def test_a_bad_edit_shows_the_error_and_moves_nothing(store: Path, tenants: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, "a", "r")
        assert "plan: resubmit 2" in text(screen, "#plan")
        screen.query_one("#set-property", Input).value = "oops, tenant=eu"
        await pilot.click("#confirm")  # the form changed: it plans again and refuses
        await until(
            app,
            pilot,
            lambda: "refused: --set-property 'oops': expected KEY=VALUE" in text(screen, "#plan"),
            "refused: --set-property 'oops': expected KEY=VALUE",
        )
        assert screen.query_one("#confirm", Button).disabled
        await pilot.click("#confirm")
        await settle(app, pilot)
        assert text(screen, "#result") == ""
        await press(app, pilot, "escape")
        await settle(app, pilot)

    drive(store, script)
    assert tenants.counts("orders").dead_letter == 2 and tenants.counts("orders").active == 0


async def open_action(app: DlqApp, pilot: Any, *keys: str) -> ActionScreen:
    """Press the keys that open an action: the action screen that came up (waited for)."""
    await press(app, pilot, *keys)
    await until(app, pilot, lambda: isinstance(app.screen, ActionScreen), "the action screen")
    await settle(app, pilot)
    screen = app.screen
    assert isinstance(screen, ActionScreen)
    return screen


async def press_and_expect_no_action(app: DlqApp, pilot: Any, *keys: str) -> None:
    """Open orders and press the action keys: no action screen comes up."""
    await open_orders(app, pilot)
    await press(app, pilot, *keys)
    await settle(app, pilot)
    assert not isinstance(app.screen, ActionScreen)


def test_no_action_without_marks(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await press_and_expect_no_action(app, pilot, "d")

    drive(store, script)
    assert dlqs.counts("orders").dead_letter == 5


def test_read_only_has_no_actions(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await press_and_expect_no_action(app, pilot, "a", "r", "d", "e")
        keys = {b.binding.action for b in app.active_bindings.values() if b.enabled}
        assert not any(k.startswith("act(") for k in keys)
        assert "(read-only)" in app.sub_title

    drive(store, script, read_only=True)
    assert dlqs.counts("orders").dead_letter == 5 and dlqs.counts("orders").active == 0


def test_reasons_pane_enter_filters_the_messages(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        await press(app, pilot, "4")
        await until(app, pilot, lambda: bool(rows(app, "#reasons")), "reasons")  # a worker scans them
        assert [(r["reason"], r["count"]) for r in rows(app, "#reasons")] == [("Timeout", 3), ("Poison", 2)]
        assert "█" in text(app, "#reasons-chart")
        app.query_one("#reasons", DataTable).focus()
        await press(app, pilot, "down", "enter")
        await until(app, pilot, lambda: [r["message_id"] for r in rows(app, "#messages")] == ["p0", "p1"], "p0, p1")
        assert app.query_one(MessagesPane).filter.text == "--reason Poison"

    drive(store, script)


def test_transfer_dlq_and_start_entity(store: Path, seed: Seeder) -> None:
    seed.transfer_dead_letter("fwd", 2)
    seed.engine.counts("fwd")  # let the forwarding failure land

    async def script(app: DlqApp, pilot: Any) -> None:
        await settle(app, pilot)
        pane = app.query_one(MessagesPane)
        assert pane.address == Address(parse_entity("fwd"), SubQueue.TRANSFER_DEAD_LETTER)
        assert [r["message_id"] for r in rows(app, "#messages")] == ["x0", "x1"]

    drive(store, script, entity=Address(parse_entity("fwd"), SubQueue.TRANSFER_DEAD_LETTER))


def test_help_opens_on_question_mark(store: Path, dlqs: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        app.query_one("#entities", DataTable).focus()
        await press(app, pilot, "question_mark")
        await pilot.pause()
        assert "sbdlq ui — keys" in str(app.screen.query_one(Static).render())
        await press(app, pilot, "escape")

    drive(store, script)


def test_edit_lists_split_on_commas_and_lines_keeping_commas_inside_values() -> None:
    from sbdlq.ui.actions import split_items

    assert split_items("a=1, b=x,y\nc=2", pairs=True) == ["a=1", "b=x,y", "c=2"]
    assert split_items("bad, worse\n\nold") == ["bad", "worse", "old"]


S1_DLQ = Address(parse_entity("t/Subscriptions/s1"), SubQueue.DEAD_LETTER)


def choices_shown(screen: ActionScreen) -> list[str]:
    """The dialog's buttons in sight, by id."""
    return [str(b.id) for b in screen.query(Button) if b.display]


def test_a_fan_out_is_refused_then_accepted_with_close_the_default(store: Path, fan_out: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        screen = await open_action(app, pilot, "a", "r")
        shown = text(screen, "#plan")
        assert "refused: copies would also reach other subscriptions of topic t:\n  s2: every copy" in shown
        assert "Only this subscription is not offered: targeted routing is disabled on topic t" in shown
        assert "sbdlq routing enable-targeted t" in shown
        assert choices_shown(screen) == ["only-this", "fan-out", "replan", "close"]
        assert screen.query_one("#only-this", Button).disabled
        assert screen.query_one("#close", Button).has_focus
        for button in screen.query(Button).results(Button):
            if button.display:  # every choice in sight at 80×24
                x, y = button.region.center
                assert screen.get_widget_at(x, y)[0] is button, f"{button.id} is out of sight"
        await press(app, pilot, "enter")  # Close: nothing moved
        await settle(app, pilot)
        assert not isinstance(app.screen, ActionScreen)
        screen = await open_action(app, pilot, "r")
        await pilot.click("#fan-out")
        await until(app, pilot, lambda: text(screen, "#plan").startswith("routing: fan-out accepted"), "fan-out")
        shown = text(screen, "#plan")
        assert shown.startswith("routing: fan-out accepted") and "plan: resubmit 2 message(s)" in shown
        assert choices_shown(screen) == ["confirm", "replan", "close"]
        assert screen.query_one("#close", Button).has_focus  # copies to others: No stays the default
        # The choice holds for the topic it was made for, not for another target.
        for target, chosen in (("nowhere", False), ("t", True)):
            screen.query_one("#to", Input).value = target
            await pilot.click("#replan")
            await settle(app, pilot)
            assert ("routing: fan-out accepted" in text(screen, "#plan")) is chosen, target
        assert fan_out.active("t/Subscriptions/s2") == []
        await pilot.click("#confirm")
        await until(app, pilot, lambda: "resubmitted 2 of 2" in text(screen, "#result"), "resubmitted 2 of 2")

    drive(store, script, entity=S1_DLQ)
    assert fan_out.dlq_ids("t/Subscriptions/s1") == []
    assert [m.message_id for m in fan_out.active("t/Subscriptions/s1")] == ["f0", "f1"]
    assert [m.message_id for m in fan_out.active("t/Subscriptions/s2")] == ["f0", "f1"]


def test_only_this_subscription_sends_the_copies_to_it_alone(store: Path, fan_out: Seeder, cli: Any) -> None:
    code, _, err = cli("routing", "enable-targeted", "t", "--yes")
    assert code == 0, err

    async def script(app: DlqApp, pilot: Any) -> None:
        screen = await open_action(app, pilot, "a", "r")
        assert "Only this subscription: each copy reaches s1 alone" in text(screen, "#plan")
        assert not screen.query_one("#only-this", Button).disabled
        assert screen.query_one("#close", Button).has_focus
        await pilot.click("#only-this")
        await settle(app, pilot)
        shown = text(screen, "#plan")
        assert shown.startswith("routing: only this subscription") and "plan: resubmit 2 message(s)" in shown
        await press(app, pilot, "enter")  # Confirm has the focus: the copies go to s1 alone
        await until(app, pilot, lambda: "resubmitted 2 of 2" in text(screen, "#result"), "resubmitted 2 of 2")

    drive(store, script, entity=S1_DLQ)
    copies = fan_out.active("t/Subscriptions/s1")
    assert [m.message_id for m in copies] == ["f0", "f1"]
    assert {m.application_properties["sbdlq-target"] for m in copies} == {"s1"}
    assert fan_out.active("t/Subscriptions/s2") == [] and fan_out.dlq_ids("t/Subscriptions/s1") == []


class HeldBackend(EmulatorBackend):
    """The emulator with a gate in every round trip: while `gate` is clear, a call waits there
    (a far namespace, held still for as long as the test needs)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.gate = asyncio.Event()
        self.gate.set()

    async def _round_trip(self) -> None:
        await self.gate.wait()
        await super()._round_trip()


def test_a_key_pressed_while_a_filtered_page_loads_goes_to_the_table(store: Path, dlqs: Seeder) -> None:
    """On a far namespace a page takes a while: `a` right after Enter marks, it is not typed into the filter."""

    async def go() -> None:
        backend = HeldBackend(str(store))
        app = DlqApp(backend, refresh_s=3600)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await open_orders(app, pilot)
            await press(app, pilot, "slash", *"--reason Timeout")
            backend.gate.clear()  # the page Enter asks for waits at the gate until `a` is in
            try:
                app.post_message(events.Key("enter", "\r"))
                on_table = lambda: getattr(app.focused, "id", None) == "messages"  # noqa: E731
                await until(app, pilot, on_table, "focus on the table while the page loads", held=True)
                app.post_message(events.Key("a", "a"))
                handed_on = asyncio.Event()
                app.call_later(handed_on.set)  # runs once the app has handed `a` to the focused widget
                await handed_on.wait()
            finally:
                backend.gate.set()  # also when a check failed: the app must be able to stop
            await until(app, pilot, lambda: "all that match marked" in text(app, "#messages-status"), "the marks")
            await until(
                app, pilot, lambda: [r["message_id"] for r in rows(app, "#messages")] == ["t0", "t1", "t2"], "the page"
            )
            assert app.query_one("#filter", Input).value == "--reason Timeout"

    asyncio.run(go())


# ------------------------------------------------------------- at 80 columns (issue 38 item 7)


def test_message_ids_are_shown_whole_at_80_columns(store: Path, seed: Seeder) -> None:
    """Ids come before the free text, so the 80-column screen shows them whole (they were `ord-p`)."""
    seed.queue("orders")
    ids = [f"ord-paymentdeclined-{i:07d}" for i in range(3)]
    seed.dead_letter(
        "orders", messages=[OutboundMessage(body=b"{}", message_id=m, subject="order.created") for m in ids]
    )

    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        table = app.query_one("#messages", DataTable)
        keys = [str(key.value) for key in table.columns]
        widths = [column.get_render_width(table) for column in table.columns.values()]
        id_ends_at = sum(widths[: keys.index("message_id") + 1])
        assert id_ends_at <= table.scrollable_content_region.width, (keys, widths)
        assert [r["message_id"] for r in rows(app, "#messages")] == ids

    drive(store, script)


def test_a_dialogs_progress_bar_shows_only_once_the_work_starts(store: Path, tenants: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, "a", "r")
        bar = screen.query_one("#progress")
        assert "plan: resubmit 2" in text(screen, "#plan")
        assert not bar.display  # waiting for Confirm: no bar animating at --%
        await pilot.click("#confirm")
        await until(app, pilot, lambda: "resubmitted 2 of 2" in text(screen, "#result"), "resubmitted 2 of 2")
        assert bar.display

    drive(store, script)


def test_the_plan_shows_the_copy_as_it_will_be_sent_before_any_edit(store: Path, tenants: Seeder) -> None:
    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        await press(app, pilot, "space")  # m0
        screen = await open_action(app, pilot, "r")
        shown = text(screen, "#plan")
        assert "example: the copy of sequence number" in shown
        assert "property sbdlq-attempt: (absent) → 1" in shown  # what every copy carries, unedited

    drive(store, script)
    assert tenants.counts("orders").dead_letter == 2  # a plan moves nothing


def test_the_help_is_laid_out_for_80_by_24(store: Path, dlqs: Seeder) -> None:
    """Every line of `?` fits its box without wrapping, the box fits 24 lines, continuation lines
    sit under their text (never a ragged wrap back to the left edge)."""

    async def script(app: DlqApp, pilot: Any) -> None:
        app.query_one("#entities", DataTable).focus()
        await press(app, pilot, "question_mark")
        help_text = app.screen.query_one(Static)
        shown = str(help_text.render()).splitlines()
        assert help_text.size.height == len(shown)  # no line wrapped
        assert max(len(line) for line in shown) <= help_text.size.width
        assert app.screen.query_one("#help").outer_size.height <= SIZE[1]
        column = shown[2].index("1 entities")  # where the text after the labels starts
        continued = [line for line in shown[2:-2] if line.startswith(" ")]
        assert continued and all(line[:column].isspace() and line[column] != " " for line in continued)


def test_fingerprints_pane_enter_filters_the_messages(store: Path, seed: Seeder) -> None:
    from sbdlq.fingerprint import fingerprint

    seed.queue("orders")
    for i, (what, n) in enumerate([("Order", 4821), ("Customer", 7), ("Order", 9)]):
        seed.dead_letter("orders", 1, "NotFound", f"{what} {n} not found in store eu-west-{i}", prefix=f"n{i}")
    order = fingerprint("NotFound", "Order 1 not found in store eu-west-1").id
    customer = fingerprint("NotFound", "Customer 1 not found in store eu-west-1").id

    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        await press(app, pilot, "5")
        await until(app, pilot, lambda: bool(rows(app, "#fingerprints")), "fingerprints")  # a worker scans them
        shown = [(r["fingerprint"], r["count"], r["template"]) for r in rows(app, "#fingerprints")]
        assert shown == [
            (order, 2, "Order <num> not found in store <id>"),
            (customer, 1, "Customer <num> not found in store <id>"),
        ]
        app.query_one("#fingerprints", DataTable).focus()
        await press(app, pilot, "enter")
        await until(app, pilot, lambda: [r["message_id"] for r in rows(app, "#messages")] == ["n00", "n20"], "n00, n20")
        assert app.query_one(MessagesPane).filter.text == f"--fingerprint {order}"

    drive(store, script)


def test_resubmit_spread_over_a_window_schedules_the_copies(
    store: Path, dlqs: Seeder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SBDLQ_STATE_DIR", str(tmp_path / "state"))

    async def script(app: DlqApp, pilot: Any) -> None:
        await open_orders(app, pilot)
        screen = await open_action(app, pilot, "a", "r")
        screen.query_one("#spread", Input).value = "soon"
        await pilot.click("#replan")
        await until(app, pilot, lambda: "refused: invalid --spread 'soon'" in text(screen, "#plan"), "the refusal")
        assert screen.query_one("#confirm", Button).disabled
        screen.query_one("#spread", Input).value = "2h"
        await pilot.click("#replan")
        await until(app, pilot, lambda: "scheduled evenly over 2h" in text(screen, "#plan"), "the spread plan")
        await pilot.click("#confirm")
        await until(app, pilot, lambda: "copies scheduled from" in text(screen, "#result"), "the spread result")

    drive(store, script)
    counts = dlqs.counts("orders")
    assert (counts.dead_letter, counts.active + counts.scheduled) == (0, 5) and counts.scheduled >= 4
    assert len(list((tmp_path / "state" / "spreads").glob("*.jsonl"))) == 1
