"""The `sbdlq ui` application: four panes in tabs, a footer of keys, actions in modal screens."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, TabbedContent, TabPane

from sbdlq.addresses import Address
from sbdlq.backends.base import Backend
from sbdlq.errors import SbdlqError
from sbdlq.ui.actions import Kind, Tuning
from sbdlq.ui.detail_pane import DetailPane
from sbdlq.ui.entities_pane import EntitiesPane
from sbdlq.ui.fingerprints_pane import FingerprintsPane
from sbdlq.ui.messages_pane import MessagesPane
from sbdlq.ui.reasons_pane import ReasonsPane
from sbdlq.ui.screens import ActionScreen, HelpScreen

ACTIONS = ("resubmit", "purge", "export")
# What takes the keys when a pane is shown.
FOCUS = {
    "entities": "#entities",
    "messages": "#messages",
    "detail": "#detail-pane",
    "reasons": "#reasons",
    "fingerprints": "#fingerprints",
}
#: The panes that group the open DLQ, each scanned when its tab is shown: pane id → `--by`.
GROUPINGS = {"reasons": "reason", "fingerprints": "fingerprint"}


class DlqApp(App[None]):
    """Browse and fix dead-letter queues; every change goes through `sbdlq.operations`."""

    TITLE = "sbdlq"
    # The footer needs the room at 80 columns; every command has a key (see `?`).
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #entities, #messages, #reasons, #fingerprints { height: 1fr; }
    #entity-status, #messages-status, #messages-title, #reasons-title, #fingerprints-title { height: 1; }
    #reasons-chart { height: auto; max-height: 8; }
    ActionScreen, HelpScreen { align: center middle; }
    #action, #help { width: 78; height: auto; max-height: 100%; border: round $accent; background: $surface; }
    #action-title { height: auto; max-height: 2; }
    #action-body { height: auto; }
    #buttons { height: 3; dock: bottom; }
    #confirm-name { display: none; }
    #plan, #result { height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),  # in a text field, q is typed (Ctrl+Q, Textual's, quits there too)
        Binding("1", "show('entities')", "Entities", show=False),
        Binding("2", "show('messages')", "Messages", show=False),
        Binding("3", "show('detail')", "Detail", show=False),
        Binding("4", "show('reasons')", "Reasons", show=False),
        Binding("5", "show('fingerprints')", "Fingerprints", show=False),
        Binding("r", "act('resubmit')", "Resubmit"),
        Binding("d", "act('purge')", "Purge"),
        Binding("e", "act('export')", "Export"),
    ]

    def __init__(
        self,
        backend: Backend,
        *,
        read_only: bool = False,
        refresh_s: float = 10.0,
        tuning: Tuning | None = None,
        target: str = "",
        entity: Address | None = None,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.read_only = read_only
        self.refresh_s = refresh_s
        self.tuning = tuning or Tuning()
        self.start_at = entity
        self.sub_title = target + (" (read-only)" if read_only else "")
        #: the DLQ each grouping pane last scanned (None: scan at the next show)
        self.grouped_for: dict[str, Address | None] = dict.fromkeys(GROUPINGS)

    def compose(self) -> ComposeResult:
        with TabbedContent(initial="entities-tab"):
            with TabPane("1 Entities", id="entities-tab"):
                yield EntitiesPane(id="entities-pane")
            with TabPane("2 Messages", id="messages-tab"):
                yield MessagesPane(id="messages-pane")
            with TabPane("3 Detail", id="detail-tab"):
                yield DetailPane(id="detail-pane")
            with TabPane("4 Reasons", id="reasons-tab"):
                yield ReasonsPane(id="reasons-pane")
            with TabPane("5 Fingerprints", id="fingerprints-tab"):
                yield FingerprintsPane(id="fingerprints-pane")
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        await self.refresh_counts()
        self.set_interval(self.refresh_s, self.refresh_counts)
        if self.start_at is not None:
            await self.open_dlq(self.start_at)
        else:
            # The table, not the filter box: every key works from the first frame (`/` filters).
            self.query_one("#entities").focus()

    async def on_unmount(self) -> None:
        await self.backend.close()

    # ------------------------------------------------------------------ data

    async def refresh_counts(self) -> None:
        """Counts of every queue and subscription (the `count` operation)."""
        from sbdlq.operations.browse import count_entities

        try:
            counts = await count_entities(self.backend, None)
        except SbdlqError as exc:
            self.notify(exc.line(), severity="error", timeout=8)
            return
        self.query_one(EntitiesPane).show(counts)

    async def open_dlq(self, address: Address, filter_text: str | None = None) -> None:
        self.action_show("messages")
        pane = self.query_one(MessagesPane)
        await pane.open(self.backend, address, filter_text)

    def load_groups(self, pane: str) -> None:
        """inspect-reason over the whole DLQ for a grouping pane, in a worker: the panes stay live while it scans."""
        address = self.query_one(MessagesPane).address
        if address is None or address == self.grouped_for[pane]:
            return
        self.grouped_for[pane] = address
        self._grouping_pane(pane).scanning(str(address))
        self.run_worker(self._scan_groups(pane, address), exclusive=True, group=pane)

    def _grouping_pane(self, pane: str) -> Any:
        return self.query_one(FingerprintsPane) if pane == "fingerprints" else self.query_one(ReasonsPane)

    async def _scan_groups(self, pane: str, address: Address) -> None:
        from sbdlq.operations.browse import inspect_reasons

        try:
            groups = await inspect_reasons(self.backend, address, by=GROUPINGS[pane])
        except SbdlqError as exc:
            self.grouped_for[pane] = None
            self.notify(exc.line(), severity="error", timeout=8)
            return
        self._grouping_pane(pane).show(str(address), groups)

    # ------------------------------------------------------------------ events

    async def on_entities_pane_opened(self, event: EntitiesPane.Opened) -> None:
        await self.open_dlq(event.address, filter_text=self.query_one("#filter").value)  # type: ignore[attr-defined]

    def on_messages_pane_chosen(self, event: MessagesPane.Chosen) -> None:
        self.query_one(DetailPane).show(event.message)
        self.action_show("detail")

    async def on_reasons_pane_chosen(self, event: ReasonsPane.Chosen) -> None:
        from sbdlq.ui.filterline import reason_filter

        address = self.query_one(MessagesPane).address
        if address is not None:
            await self.open_dlq(address, reason_filter(event.reason))

    async def on_fingerprints_pane_chosen(self, event: FingerprintsPane.Chosen) -> None:
        from sbdlq.ui.filterline import fingerprint_filter

        address = self.query_one(MessagesPane).address
        if address is not None:
            await self.open_dlq(address, fingerprint_filter(event.fingerprint))

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane = (event.pane.id or "").removesuffix("-tab")
        if pane in GROUPINGS:
            self.load_groups(pane)

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """--read-only: the actions are not there at all (hidden from the footer, keys ignored)."""
        if action == "act":
            return not self.read_only
        return True

    def action_show(self, pane: str) -> None:
        # Focus first, at once (`focus()` waits its turn): the pane being left must not hold the
        # focus when it is hidden. Textual would hand it to a neighbour in that hidden pane, and a
        # focused widget's tab becomes the active one: on a loaded machine the tabs went back and
        # forth and the focus ended in the Messages filter, where `a` was typed as text.
        widget = self.query_one(FOCUS[pane])
        widget.screen.set_focus(widget)
        self.query_one(TabbedContent).active = f"{pane}-tab"

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        """q and Ctrl+Q, from any pane or dialog; not while an action runs (it stops only at a safe point)."""
        if isinstance(self.screen, ActionScreen) and self.screen.running:
            self.notify("the run is still going; quit when it has finished", severity="warning")
            return
        await super().action_quit()

    def action_act(self, kind: Kind) -> None:
        if self.read_only:  # the binding is off; this guards any other way in
            return
        pane = self.query_one(MessagesPane)
        chosen = pane.target()
        if pane.address is None or chosen is None:
            self.notify("mark messages (space) or all that match (a) in the Messages pane first", severity="warning")
            return
        selection, scope = chosen
        screen = ActionScreen(
            self.backend, kind, pane.address, selection, scope, self.tuning, all_matching=pane.all_matching
        )
        self.push_screen(screen, self._after_action)

    async def _after_action(self, ran: bool | None) -> None:
        if not ran:
            return
        pane = self.query_one(MessagesPane)
        self.grouped_for = dict.fromkeys(GROUPINGS)
        await self.refresh_counts()
        if pane.address is not None:
            pane.marked.clear()
            pane.all_matching = False
            pane.starts = []
            await pane.load(0)


def run_app(app: DlqApp) -> Any:
    """Run until the operator quits."""
    return app.run()
