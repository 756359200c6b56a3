"""Repairs applied to every copy that resubmit and replay send (`--set-property`, `--set-ttl`, ...).

Built once from the command line into one typed `CopyEdits`, checked before any I/O, and applied
to each copy after the dead-letter properties were dropped (DESIGN §4), so the routing check and
the broker both see the edited copy.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sbdlq.errors import BadInput
from sbdlq.models import (
    ATTEMPT,
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    RESUBMITTED_FROM,
    Message,
    OutboundMessage,
)


@dataclass(frozen=True, slots=True)
class EditOption:
    """One edit option: its flag, its keyword (and policy key), its help, and what it edits."""

    flag: str
    keyword: str
    help: str
    #: given several times, its values are a list
    repeatable: bool = False
    #: the OutboundMessage field it sets (None: it edits the application properties)
    system_field: str | None = None


#: Every edit option of resubmit and replay, in the order --help shows them: the commands' option
#: group (cli/edit_options.py), the policy's edit keys (policy/schema.py) and the compile read it.
EDIT_OPTIONS: tuple[EditOption, ...] = (
    EditOption("--set-property", "set_property", "Set K=V on every copy (typed like emulator send; repeatable).", True),
    EditOption("--remove-property", "remove_property", "Remove property K from every copy (repeatable).", True),
    EditOption("--set-subject", "set_subject", "Subject (label) of every copy ('' clears it).", system_field="subject"),
    EditOption("--set-content-type", "set_content_type", "Content type ('' clears it).", system_field="content_type"),
    EditOption("--set-ttl", "set_ttl", "Time to live of every copy (30m, 7d, PT1H).", system_field="time_to_live_s"),
    EditOption("--set-session-id", "set_session_id", "Session id ('' clears it).", system_field="session_id"),
    EditOption(
        "--set-correlation-id", "set_correlation_id", "Correlation id ('' clears it).", system_field="correlation_id"
    ),
)
#: The system properties an edit can set: OutboundMessage field → its option.
SYSTEM_OPTIONS = {o.system_field: o.flag for o in EDIT_OPTIONS if o.system_field is not None}
#: What the dry run's example shows of a message and of its copy, in this order.
EXAMPLE_FIELDS = ("message_id", "subject", "content_type", "correlation_id", "session_id", "time_to_live_s")


@dataclass(frozen=True, slots=True)
class CopyEdits:
    """What to change on every copy; empty: copies as DESIGN §4 makes them."""

    set_properties: Mapping[str, Any] = field(default_factory=dict)
    remove_properties: tuple[str, ...] = ()
    #: OutboundMessage field → new value (None clears it: the option was given as '').
    system: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not (self.set_properties or self.remove_properties or self.system)

    def apply(self, copy: OutboundMessage) -> OutboundMessage:
        """Edit the copy in place (its properties are its own) and return it."""
        props = copy.application_properties
        for name in self.remove_properties:
            props.pop(name, None)
        props.update(self.set_properties)
        for name, value in self.system.items():
            setattr(copy, name, value)
        return copy


def build_edits(
    *,
    set_property: Iterable[str] = (),
    remove_property: Iterable[str] = (),
    system: Mapping[str, str | None] | None = None,
    keep_dead_letter_properties: bool = False,
) -> CopyEdits:
    """The edits from the option values; BadInput (exit 2) naming the option when one cannot apply.

    `system` maps an OutboundMessage field of SYSTEM_OPTIONS to its option's text (None: not
    given, '': clear the field; `time_to_live_s` is a duration).
    """
    from sbdlq.property_values import parse_properties

    setting = parse_properties(set_property, option="--set-property")
    removing = tuple(dict.fromkeys(k.strip() for k in remove_property))
    for name in removing:
        _check_removable(name, keep_dead_letter_properties)
    if RESUBMITTED_FROM in setting:
        raise BadInput(
            f"--set-property {RESUBMITTED_FROM}: sbdlq sets it on every copy (where the copy came from)",
            hint=f"--remove-property {RESUBMITTED_FROM} leaves it off",
        )
    if ATTEMPT in setting:
        raise BadInput(
            f"--set-property {ATTEMPT}: sbdlq counts it on every copy (the original's count + 1)",
            hint=f"--remove-property {ATTEMPT} leaves it off",
        )
    both = sorted(set(setting) & set(removing))
    if both:
        raise BadInput(f"--set-property {both[0]} and --remove-property {both[0]}: give one or the other")
    return CopyEdits(setting, removing, _system_edits(system or {}))


def compile_edits(given: Mapping[str, Any], *, keep_dead_letter_properties: bool = False) -> CopyEdits:
    """The edits from the options given (EDIT_OPTIONS keyword → value; None or absent: not given)."""
    by_keyword = {o.keyword: o for o in EDIT_OPTIONS}
    unknown = sorted(set(given) - set(by_keyword))
    if unknown:
        raise TypeError(f"not an edit option: {', '.join(unknown)}")
    return build_edits(
        set_property=given.get("set_property") or (),
        remove_property=given.get("remove_property") or (),
        system={o.system_field: given.get(o.keyword) for o in EDIT_OPTIONS if o.system_field is not None},
        keep_dead_letter_properties=keep_dead_letter_properties,
    )


def _check_removable(name: str, keep_dead_letter_properties: bool) -> None:
    if not name:
        raise BadInput("--remove-property '': give a property name")
    if name in (DEAD_LETTER_REASON, DEAD_LETTER_DESCRIPTION) and not keep_dead_letter_properties:
        raise BadInput(
            f"--remove-property {name}: copies drop it anyway",
            hint="it is kept only with --keep-dead-letter-properties",
        )


def _system_edits(given: Mapping[str, str | None]) -> dict[str, Any]:
    from sbdlq.timeparse import parse_duration

    out: dict[str, Any] = {}
    for name, text in given.items():
        if text is None:
            continue
        option = SYSTEM_OPTIONS[name]
        if name != "time_to_live_s":
            out[name] = text or None
            continue
        ttl = parse_duration(text, what=option)
        if ttl <= 0:
            raise BadInput(f"invalid {option} {text!r}: give a positive duration")
        out[name] = ttl
    return out


def copy_example(original: Message, copy: OutboundMessage) -> dict[str, Any]:
    """One message and its copy side by side, for a dry run (the `example` of the JSON result)."""

    def view(m: Message | OutboundMessage) -> dict[str, Any]:
        doc = {name: getattr(m, name) for name in EXAMPLE_FIELDS}
        # Plain JSON values, as in the Message JSON shape (times and bytes as text).
        doc["application_properties"] = json.loads(json.dumps(m.application_properties, default=str))
        return doc

    return {"sequence_number": original.sequence_number, "before": view(original), "after": view(copy)}


def example_rows(example: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(field, before, after) for what differs between a message and its copy."""
    before, after = example["before"], example["after"]
    rows = [(name, _text(before[name]), _text(after[name])) for name in EXAMPLE_FIELDS if before[name] != after[name]]
    old, new = before["application_properties"], after["application_properties"]
    for key in [*old, *(k for k in new if k not in old)]:
        if old.get(key, _ABSENT) != new.get(key, _ABSENT):
            rows.append((f"property {key}", _text(old.get(key, _ABSENT)), _text(new.get(key, _ABSENT))))
    return rows


_ABSENT = object()


def _text(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    if value is None:
        return "(none)"
    return json.dumps(value, ensure_ascii=False)
