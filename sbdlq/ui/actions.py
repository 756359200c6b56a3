"""The actions of the console: plan (a dry run of the operation), then run it; no Textual here.

Each action calls the same operation as its command (`operations.resubmit`, `operations.purge`,
and for export `operations.export.export_messages`, the purge's `Exporter` without the delete),
with the same keywords:
`ResubmitOptions.operation_kwargs()` is the object the confirmation screen builds, so the edit
options of resubmit (issue 15) are new fields there, not a new code path. A resubmit refused for
its fan-out (issue 25) comes back with `FanOutChoices`: the dialog offers `only_this_subscription`
and `fan_out`, the same keywords as `--only-this-subscription` and `--fan-out`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from sbdlq.addresses import Address, EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import SbdlqError
from sbdlq.operations.edits import CopyEdits, build_edits, example_rows
from sbdlq.operations.moving_run import Progress
from sbdlq.operations.resubmit import FanOutRefused
from sbdlq.operations.spread import SpreadOptions
from sbdlq.selection import Selection

Kind = Literal["resubmit", "purge", "export"]


def _keywords(options: Any, *, besides: str = "") -> dict[str, Any]:
    """The fields of an options dataclass as the keywords of its operation call (all but `besides`)."""
    return {f.name: getattr(options, f.name) for f in fields(options) if f.name != besides}


@dataclass(frozen=True)
class Tuning:
    """--batch-size and --concurrency as the commands resolve them (option, else profile, else default)."""

    resubmit_batch_size: int = 100
    purge_batch_size: int = 500
    concurrency: int = 32


@dataclass(frozen=True)
class ResubmitOptions:
    """What `sbdlq resubmit` passes to `operations.resubmit.resubmit` besides the source and selection."""

    to: EntityPath
    new_message_id: bool = False
    keep_dead_letter_properties: bool = False
    batch_size: int = 100
    concurrency: int = 32
    rate: float | None = None
    edits: CopyEdits = field(default_factory=CopyEdits)
    #: --fan-out: copies of a subscription's DLQ may reach the topic's other subscriptions too
    fan_out: bool = False
    #: --only-this-subscription: the copies are targeted at the subscription they left
    only_this_subscription: bool = False
    #: --spread: the copies scheduled evenly over a window (the dialog's "Spread over ...")
    spread: SpreadOptions | None = None

    def operation_kwargs(self) -> dict[str, Any]:
        """The keywords of the operation call, as the command gives them (`to` is positional)."""
        return _keywords(self, besides="to")


#: A comma that starts a new K=V item (one followed by `KEY=`), so `tags=a,b` stays one value.
_ITEM_COMMA = re.compile(r",\s*(?=[^,=\s][^,=]*=)")


def split_items(text: str, *, pairs: bool = False) -> list[str]:
    """A form field's list: items on separate lines or separated by commas; blanks dropped.

    With `pairs` (K=V items), only a comma followed by the next `KEY=` separates, so a value
    may itself hold commas.
    """
    out: list[str] = []
    for line in text.splitlines():
        out.extend(_ITEM_COMMA.split(line) if pairs else line.split(","))
    return [item.strip() for item in out if item.strip()]


def _field_text(text: str) -> str | None:
    """A system-property field: empty is "not given"; '' or "" (as typed on a shell) clears."""
    text = text.strip()
    if not text:
        return None
    return "" if text in ("''", '""') else text


def edits_from_form(
    *, set_property: str, remove_property: str, system: dict[str, str], keep_dead_letter_properties: bool
) -> CopyEdits:
    """The edits the form's fields give, built as `sbdlq resubmit` builds its edit options (same errors)."""
    return build_edits(
        set_property=split_items(set_property, pairs=True),
        remove_property=split_items(remove_property),
        system={name: _field_text(text) for name, text in system.items()},
        keep_dead_letter_properties=keep_dead_letter_properties,
    )


@dataclass(frozen=True)
class PurgeOptions:
    """What `sbdlq purge` passes to `operations.purge.purge`: with `export`, each message is written first."""

    export: Path | None = None
    batch_size: int = 500
    concurrency: int = 32

    def operation_kwargs(self) -> dict[str, Any]:
        return _keywords(self)


@dataclass(frozen=True)
class ExportOptions:
    """Export to JSONL without deleting (what `sbdlq peek --all -o jsonl` writes, synced)."""

    path: Path


@dataclass(frozen=True)
class Action:
    """One action on the marked messages or on every message the filter matches."""

    kind: Kind
    source: Address
    selection: Selection
    scope: str
    options: ResubmitOptions | PurgeOptions | ExportOptions


@dataclass
class Outcome:
    """A plan or a run: the lines to show, how many messages, and whether it may (or did) go well."""

    lines: list[str] = field(default_factory=list)
    selected: int = 0
    ok: bool = True
    summary: str = ""
    #: A resubmit's dry run: one message and its copy as it will be sent (the operation's `example`).
    example: dict[str, Any] | None = None
    #: A resubmit refused for its fan-out: what the dialog offers instead.
    fan_out: FanOutChoices | None = None


@dataclass(frozen=True)
class FanOutChoices:
    """A resubmit refused because its copies would reach other subscriptions, and the two ways
    forward the console offers (as `--only-this-subscription` and `--fan-out` do)."""

    topic: EntityPath
    subscription: str
    #: each other subscription that would take copies, and how many
    reached: dict[str, str]
    #: why "only this subscription" cannot be chosen (targeted routing not enabled); None: it can
    targeted_missing: str | None = None

    def lines(self) -> list[str]:
        """The refusal and the choices, each line within the dialog's width."""
        lines = [f"refused: copies would also reach other subscriptions of topic {self.topic}:"]
        lines.extend(f"  {name}: {how}" for name, how in self.reached.items())
        if self.targeted_missing is None:
            lines.append(f"Only this subscription: each copy reaches {self.subscription} alone (sbdlq-target).")
        else:
            lines.append(f"Only this subscription is not offered: {self.targeted_missing}")
        lines.append("Accept fan-out: every subscription above gets its copies too.")
        lines.append("Or send to a queue that only this subscription's consumer reads.")
        return lines


def fan_out_choices(refusal: FanOutRefused, source: Address) -> FanOutChoices:
    """The choices after a fan-out refusal ("only this subscription" needs targeted routing enabled)."""
    subscription = source.entity.subscription or ""
    return FanOutChoices(refusal.topic, subscription, dict(refusal.reached), refusal.targeted_missing)


def example_lines(example: dict[str, Any]) -> list[str]:
    """The dry run's example as lines: what the edits and the copy rules change on one message."""
    lines = [f"example: the copy of sequence number {example['sequence_number']}"]
    lines.extend(f"  {name}: {before} → {after}" for name, before, after in example_rows(example))
    return lines


def default_target(source: Address) -> EntityPath:
    """Where resubmit sends by default: the queue, or a subscription's topic."""
    return EntityPath(source.entity.name) if source.entity.is_subscription else source.entity


async def plan(backend: Backend, action: Action) -> Outcome:
    """The operation's dry run: its checks (routing, duplicate detection, export file), plan and notes."""
    out = Outcome()
    try:
        out.selected, out.example = await _call(backend, action, dry_run=True, note=out.lines.append, progress=None)
    except FanOutRefused as exc:
        choices = fan_out_choices(exc, action.source)
        return Outcome(lines=[*out.lines, *choices.lines()], ok=False, fan_out=choices)
    except SbdlqError as exc:
        return Outcome(lines=[*out.lines, f"refused: {exc.line()}"], ok=False)
    if out.example is not None:
        out.lines.extend(example_lines(out.example))
    return out


async def execute(backend: Backend, action: Action, progress: Progress | None) -> Outcome:
    """Run the action for real; the summary line is the command's."""
    out = Outcome()
    try:
        out.selected, _ = await _call(backend, action, dry_run=False, note=out.lines.append, progress=progress)
    except SbdlqError as exc:
        out.ok = False
        out.summary = f"failed: {exc.line()}"
        return out
    out.summary = out.lines.pop() if out.lines else ""  # _call's last note is the summary line
    out.ok = not any(line.startswith("error") for line in out.lines)
    return out


async def _call(
    backend: Backend, action: Action, *, dry_run: bool, note: Callable[[str], None], progress: Progress | None
) -> tuple[int, dict[str, Any] | None]:
    """Call the action's operation; returns the number selected and the dry run's example (resubmit
    with edits). The summary is the last note."""
    opts = action.options
    if isinstance(opts, ResubmitOptions):
        from sbdlq.operations.resubmit import resubmit

        r: Any = await resubmit(
            backend,
            action.source,
            opts.to,
            selection=action.selection,
            dry_run=dry_run,
            note=note,
            progress=progress,
            example=dry_run,  # the plan shows the copy as it will be sent, edited or not
            **opts.operation_kwargs(),
        )
    elif isinstance(opts, PurgeOptions):
        from sbdlq.operations.purge import purge

        r = await purge(
            backend,
            action.source,
            selection=action.selection,
            dry_run=dry_run,
            note=note,
            progress=progress,
            **opts.operation_kwargs(),
        )
    else:
        from sbdlq.operations.export import export_messages

        r = await export_messages(
            backend,
            action.source,
            opts.path,
            selection=action.selection,
            dry_run=dry_run,
            note=note,
            progress=progress,
        )
    if not dry_run:
        for line in r.errors:
            note(f"error: {line}")
        left = r.left_over()
        if left is not None:
            note(f"error: {left}")
        note(r.summary())
    return int(r.selected), getattr(r, "example", None)
