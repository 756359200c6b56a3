"""Modal screens: help, and an action's plan → confirmation → progress → result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, ProgressBar, Static

from sbdlq.addresses import EntityPath, SubQueue, parse_address
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, SbdlqError
from sbdlq.operations.spread import spread_options
from sbdlq.selection import Selection
from sbdlq.ui.actions import (
    Action,
    ExportOptions,
    Kind,
    Outcome,
    PurgeOptions,
    ResubmitOptions,
    Tuning,
    default_target,
    edits_from_form,
    execute,
    plan,
)
from sbdlq.ui.fields import KeyOrderInput

#: The resubmit form's edit fields, two to a line where they fit: (input id, label, placeholder).
#: An id `set-<field>` edits the OutboundMessage field of SYSTEM_OPTIONS of that name.
EDIT_ROWS: tuple[tuple[tuple[str, str, str], ...], ...] = (
    (("set-property", "set property", "K=V, K2=V2 (typed as on the command line)"),),
    (("remove-property", "remove prop.", "K, K2"),),
    (("set-subject", "subject", "unchanged ('' clears)"), ("set-content_type", "content type", "unchanged")),
    (("set-time_to_live_s", "ttl", "unchanged (30m, 7d)"), ("set-session_id", "session id", "unchanged")),
    (("set-correlation_id", "correlation id", "unchanged ('' clears)"),),
)
#: The plan's first line once a fan-out refusal's choice is made (by the choice's button id).
ROUTING_CHOSEN = {
    "only-this": "routing: only this subscription (--only-this-subscription)",
    "fan-out": "routing: fan-out accepted (--fan-out): other subscriptions get copies too",
}
SYSTEM_FIELDS = ("subject", "content_type", "time_to_live_s", "session_id", "correlation_id")

#: The help's width inside its box at 80 columns (`#help` is 78 wide, its border takes 2).
HELP_WIDTH = 76
#: The keys, by where they act: each group of phrases starts a line; phrases join with " · " and a
#: line breaks between phrases (inside one only when it is longer than a line), under its label.
HELP_ENTRIES: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    (
        "Anywhere",
        (
            ("1 entities", "2 messages", "3 detail", "4 reasons", "5 fingerprints", "? help"),
            ("q or Ctrl+Q quit (in a text field q is typed: Esc leaves it)",),
        ),
    ),
    ("Entities", (("/ filter (Enter or Esc: back)", "Enter open DLQ", "t transfer DLQ", "s sort"),)),
    (
        "Messages",
        (
            ("/ filter line (--reason, --where, ...)", "Enter detail"),
            ("space mark", "a all that match", "c clear marks", "n next", "p previous page"),
        ),
    ),
    (
        "Actions",
        (
            ("r resubmit", "d purge (exporting first if asked)", "e export to JSONL"),
            ("on the marked messages, or all that match: plan, then Confirm",),
        ),
    ),
    (
        "Resubmit",
        (
            (
                "edit: set property K=V, K2=V2",
                "remove property K, K2",
                "subject",
                "content type",
                "ttl",
                "session id",
                "correlation id ('' clears)",
                "Enter plans, showing a copy as it will be sent",
            ),
            (
                "copies that would reach other subscriptions are refused: choose Only this "
                "subscription (targeted routing) or Accept fan-out",
            ),
        ),
    ),
    ("Detail", (("b binary body as hex or base64",),)),
    ("Reasons", (("Enter filters the messages to that reason",),)),
    ("Fingerprints", (("the failures by error text, ids and times masked", "Enter filters to one"),)),
)


def help_text(width: int = HELP_WIDTH) -> str:
    """The help laid out for `width` columns: a label column, continuation lines under the text."""
    import textwrap

    indent = max(len(label) for label, _ in HELP_ENTRIES) + 3
    room = width - indent
    lines = ["sbdlq ui — keys", ""]
    for label, groups in HELP_ENTRIES:
        body: list[str] = []
        for phrases in groups:
            line = ""
            for phrase in phrases:
                joined = f"{line} · {phrase}" if line else phrase
                if len(joined) <= room:
                    line = joined
                    continue
                if line:
                    body.append(line)
                *whole, line = textwrap.wrap(phrase, room) or [""]
                body.extend(whole)
            body.append(line)
        lines.extend(f"{label if n == 0 else '':<{indent}}{text}" for n, text in enumerate(body))
    lines += ["", "--read-only hides every action.  Esc closes this help."]
    return "\n".join(lines)


HELP = help_text()


class HelpScreen(ModalScreen[None]):
    """The keys."""

    # A modal screen cuts the app's bindings off: q quits here as everywhere outside a text field.
    BINDINGS = [Binding("escape,question_mark", "dismiss", "Close"), Binding("q", "app.quit", "Quit")]  # noqa: RUF012

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(HELP)


class ActionScreen(ModalScreen[bool]):
    """Shows the plan (the operation's dry run), asks, runs with progress, shows the result.

    Dismissed with True when something ran, so the caller reloads what it shows.
    """

    BINDINGS = [Binding("escape", "close", "Close"), Binding("q", "app.quit", "Quit")]  # noqa: RUF012
    # One line a field, so the resubmit form, its plan and the buttons fit in 80×24.
    DEFAULT_CSS = """
    ActionScreen .field { height: 1; }
    ActionScreen .field Label { width: 15; }
    ActionScreen .field Input { width: 1fr; }
    ActionScreen .field Checkbox { width: 1fr; }
    ActionScreen .fan-out-choice { display: none; }
    """

    def __init__(
        self,
        backend: Backend,
        kind: Kind,
        source: Any,
        selection: Selection,
        scope: str,
        tuning: Tuning,
        *,
        all_matching: bool = False,
    ) -> None:
        super().__init__()
        self.backend, self.kind, self.source = backend, kind, source
        self.selection, self.scope, self.tuning = selection, scope, tuning
        #: on every message that matches (not on marked ones): a purge of it with no export needs the name
        self.all_matching = all_matching
        self.planned: Action | None = None
        self.running = False
        self.ran = False
        #: after a fan-out refusal, what the operator chose ("only-this" or "fan-out") and for which
        #: topic: a form that names another target plans without it (None: no choice)
        self.routing_choice: tuple[str, EntityPath] | None = None
        #: the topic of the fan-out refusal shown (what a choice is made for)
        self.refused_for: EntityPath | None = None

    def compose(self) -> ComposeResult:
        # The buttons sit below the scrolling body, never inside it: at any size they stay in view.
        with Vertical(id="action"):
            yield Static(f"{self.kind} {self.scope} of {self.source}", id="action-title")
            with VerticalScroll(id="action-body"):
                if self.kind == "resubmit":
                    yield from self._resubmit_form()
                elif self.kind == "purge":
                    yield KeyOrderInput(placeholder="export to JSONL first (path; empty: no export)", id="export")
                else:
                    yield KeyOrderInput(placeholder="export to JSONL file (path)", id="export")
                yield Static("", id="plan")
                if self.kind == "purge":
                    name_prompt = f"type {self.entity_name} to delete with no export"
                    yield KeyOrderInput(placeholder=name_prompt, id="confirm-name")
                # Hidden until the work starts: waiting for Confirm, it would animate at --%.
                progress = ProgressBar(id="progress", show_eta=False)
                progress.display = False
                yield progress
                yield Static("", id="result")
            with Horizontal(id="buttons"):
                yield Button("Confirm", id="confirm", variant="error", disabled=True)
                # Shown, in Confirm's place, only while a resubmit is refused for its fan-out.
                yield Button("Only this subscription", id="only-this", classes="fan-out-choice")
                yield Button("Accept fan-out", id="fan-out", classes="fan-out-choice")
                yield Button("Plan again", id="replan")
                yield Button("Close", id="close")

    @property
    def entity_name(self) -> str:
        """What the operator types to delete all that match with no export: the entity's path."""
        return str(self.source.entity)

    def name_needed(self, action: Action) -> bool:
        """Deleting all that match (the whole DLQ, maybe) with no export: only the typed name confirms.

        The CLI asks y/N with No the default; three keys (`a`, `d`, Enter) must not empty a DLQ.
        """
        return isinstance(action.options, PurgeOptions) and action.options.export is None and self.all_matching

    def destructive(self, action: Action) -> bool:
        """Deletes with no copy elsewhere, or sends copies to other subscriptions too: Confirm never
        has the focus (Close has, like the CLI's No)."""
        opts = action.options
        return (isinstance(opts, PurgeOptions) and opts.export is None) or (
            isinstance(opts, ResubmitOptions) and opts.fan_out
        )

    def _resubmit_form(self) -> ComposeResult:
        """Target, the spread, the two switches and the edit options of `sbdlq resubmit`, one line each."""
        with Horizontal(classes="field"):
            yield Label("send to")
            target = str(default_target(self.source))
            yield KeyOrderInput(target, placeholder="queue or topic", id="to", compact=True)
        with Horizontal(classes="field"):
            yield Label("spread over")
            yield KeyOrderInput(placeholder="a duration such as 2h (empty: send now)", id="spread", compact=True)
        with Horizontal(classes="field"):
            yield Checkbox("new message ids", id="new-message-id", compact=True)
            yield Checkbox("keep dead-letter properties", id="keep-dl", compact=True)
        for row in EDIT_ROWS:
            with Horizontal(classes="field"):
                for input_id, label, placeholder in row:
                    yield Label(label)
                    yield KeyOrderInput(placeholder=placeholder, id=input_id, compact=True)

    #: What the dialog holds besides its body: border (2), title (at most 2), buttons (3).
    FRAME_LINES = 7

    def on_resize(self, event: events.Resize) -> None:
        self._fit()

    def _fit(self) -> None:
        """Size to content, up to the terminal's height: past that the body scrolls, above the buttons."""
        body = self.query_one("#action-body", VerticalScroll)
        body.styles.max_height = max(3, self.size.height - self.FRAME_LINES)

    async def on_mount(self) -> None:
        self._fit()
        for button in self.query(Button):
            # No press-effect lock-out: `running`/`ran` already guard a double confirm, and a new
            # plan must be confirmable at once.
            button.active_effect_duration = 0
        await self.replan()

    def options(self) -> ResubmitOptions | PurgeOptions | ExportOptions:
        """The options object from the form: the same the command would pass to the operation."""
        t = self.tuning
        if self.kind == "resubmit":
            to = parse_address(self.query_one("#to", Input).value.strip() or str(default_target(self.source)))
            if to.sub_queue is not SubQueue.NONE or to.entity.is_subscription:
                raise BadInput(f"cannot send to {to}: name a queue or a topic")
            keep_dl = self.query_one("#keep-dl", Checkbox).value
            choice = self.routing_for(to.entity)
            return ResubmitOptions(
                to=to.entity,
                new_message_id=self.query_one("#new-message-id", Checkbox).value,
                keep_dead_letter_properties=keep_dl,
                batch_size=t.resubmit_batch_size,
                concurrency=t.concurrency,
                fan_out=choice == "fan-out",
                only_this_subscription=choice == "only-this",
                spread=spread_options(self._text("spread").strip() or None, None),
                edits=edits_from_form(
                    set_property=self._text("set-property"),
                    remove_property=self._text("remove-property"),
                    system={name: self._text(f"set-{name}") for name in SYSTEM_FIELDS},
                    keep_dead_letter_properties=keep_dl,
                ),
            )
        path = self.query_one("#export", Input).value.strip()
        if self.kind == "purge":
            return PurgeOptions(
                export=Path(path).expanduser() if path else None,
                batch_size=t.purge_batch_size,
                concurrency=t.concurrency,
            )
        if not path:
            raise BadInput("export needs a file path")
        return ExportOptions(Path(path).expanduser())

    def routing_for(self, target: EntityPath) -> str | None:
        """The fan-out refusal's choice, when the form still sends to the topic it was made for."""
        if self.routing_choice is None:
            return None
        choice, made_for = self.routing_choice
        return choice if made_for == target else None

    def _text(self, input_id: str) -> str:
        return self.query_one(f"#{input_id}", Input).value

    def action_of(self) -> Action:
        return Action(self.kind, self.source, self.selection, self.scope, self.options())

    async def replan(self) -> None:
        """Dry-run the action as the form says; Confirm is enabled only for a plan that may go."""
        confirm = self.query_one("#confirm", Button)
        confirm.disabled = True
        self.planned = None
        self._ask_name(False)
        try:
            action = self.action_of()
        except SbdlqError as exc:
            self._show_plan(Outcome(lines=[f"refused: {exc.line()}"], ok=False))
            return
        outcome = await plan(self.backend, action)
        if outcome.ok and outcome.selected == 0:
            outcome.lines.append("nothing to do")
            outcome.ok = False
        if outcome.fan_out is not None:
            self.routing_choice = None  # a new refusal: choose again, knowing what it says
        elif isinstance(action.options, ResubmitOptions):
            choice = self.routing_for(action.options.to)
            if choice is not None:
                outcome.lines.insert(0, ROUTING_CHOSEN[choice])
        self._show_plan(outcome)
        if not outcome.ok:
            return
        self.planned = action
        if self.name_needed(action):
            self._ask_name(True)
        elif self.destructive(action):
            confirm.disabled = False
            self.query_one("#close", Button).focus()
        else:
            confirm.disabled = False
            confirm.focus()

    def _offer_choices(self, outcome: Outcome) -> None:
        """After a fan-out refusal the choices take Confirm's place; Close keeps the focus (the CLI's No)."""
        choices = outcome.fan_out
        self.query_one("#confirm", Button).display = choices is None
        for button in self.query(".fan-out-choice").results(Button):
            button.display = choices is not None
        if choices is None:
            return
        self.refused_for = choices.topic
        self.query_one("#only-this", Button).disabled = choices.targeted_missing is not None
        self.query_one("#close", Button).focus()

    async def choose_routing(self, choice: str) -> None:
        """Plan again with the choice the refusal offered: the plan still has to be confirmed."""
        if self.refused_for is not None:
            self.routing_choice = (choice, self.refused_for)
        await self.replan()

    def _ask_name(self, ask: bool) -> None:
        """Show (and focus) the field the entity's name is typed in, or hide and empty it."""
        if self.kind != "purge":
            return
        field = self.query_one("#confirm-name", Input)
        field.display = ask
        if ask:
            field.focus()
        else:
            field.value = ""

    def _name_typed(self, typed: str | None = None) -> bool:
        """The entity's name is in the field (or in `typed`: what the field held when Enter was pressed)."""
        if typed is None:
            typed = self.query_one("#confirm-name", Input).value
        return self.kind == "purge" and typed.strip() == self.entity_name

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "confirm-name":
            event.stop()
            # Read the whole rule again: this may come after a new plan that needs no name.
            planned = self.planned
            ready = planned is not None and (not self.name_needed(planned) or self._name_typed())
            self.query_one("#confirm", Button).disabled = not ready

    def _show_plan(self, outcome: Outcome) -> None:
        self.query_one("#plan", Static).update("\n".join(outcome.lines))
        self._offer_choices(outcome)
        # A long form pushes the plan below the body's fold: scroll to its end, where the plan
        # line, the example or the refusal is (the form scrolls back up; the buttons never move).
        self._scroll_to_end()

    def _scroll_to_end(self) -> None:
        """Scroll the body to its end once the new text is laid out (before that, the end is the old one)."""
        body = self.query_one("#action-body", VerticalScroll)
        self.call_after_refresh(body.scroll_end, animate=False)

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "confirm-name":
            # The value as Enter found it: letters typed after the Enter may be in the field by now.
            await self.confirm(typed=event.value)  # runs only when the name is right (confirm checks)
            return
        await self.replan()

    async def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        await self.replan()

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "confirm":
            await self.confirm()
        elif event.button.id in ROUTING_CHOSEN:
            await self.choose_routing(str(event.button.id))
        elif event.button.id == "replan":
            await self.replan()
        else:
            self.action_close()

    async def confirm(self, typed: str | None = None) -> None:
        """Run what was planned; if the form changed since, plan again instead (confirm what you saw).

        `typed`: the name the Enter that confirms was pressed on (None: the field's value now).
        """
        if self.planned is None or self.running or self.ran:
            return
        if self.name_needed(self.planned) and not self._name_typed(typed):
            self.app.notify(f"type {self.entity_name} to delete these messages with no export", severity="warning")
            return
        try:
            current = self.action_of()
        except SbdlqError:
            current = None
        if current != self.planned:
            self.app.notify("the options changed since the plan: check the new plan and confirm again")
            await self.replan()
            return
        self.running = True
        self.query_one("#confirm", Button).disabled = True
        outcome = await execute(self.backend, self.planned, self._progress)
        self.running, self.ran = False, True
        self._ask_name(False)
        lines = [*outcome.lines, outcome.summary]
        self.query_one("#result", Static).update("\n".join(line for line in lines if line))
        self._scroll_to_end()  # the result line
        self.query_one("#close", Button).focus()

    def _progress(self, total: int | None) -> Callable[[int], None]:
        bar = self.query_one("#progress", ProgressBar)
        bar.display = True
        bar.update(total=total, progress=0)
        return lambda n: bar.advance(n)

    def action_close(self) -> None:
        if self.running:
            self.app.notify("the run is still going; it stops at a safe point only by itself")
            return
        self.dismiss(self.ran)
