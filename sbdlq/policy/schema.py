"""The policy file's shape: the kinds of key, the rule's own keys, and the typed rules they make.

Each action's keys are its own (`policy/actions/`, `PolicyAction.keys`); this module owns the
rest and what the actions share (the tuning keys, the edit keys).

The selection keys are not a second list: they are read off the selection options the commands
declare (`selection.SELECTION_OPTIONS`, `--description-contains` → `description_contains`), and
the edit keys off the edit options (`operations/edits.EDIT_OPTIONS`), so a selection or edit option added there is a
policy key too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sbdlq.operations.edits import EDIT_OPTIONS, CopyEdits
from sbdlq.selection import SELECTION_OPTIONS

if TYPE_CHECKING:
    from sbdlq.policy.actions.base import PolicyAction

#: The kinds of value a key takes (see loader.check_value).
STR, INT, BOOL, NUMBER, STRINGS, PAIRS, CHOICE, DURATION, GLOBS, PATH = (
    "text",
    "whole number",
    "true or false",
    "number",
    "text or a list of texts",
    "a list of K=V or a mapping",
    "choice",
    "duration",
    "a list of entity names or globs",
    "directory",
)


@dataclass(frozen=True, slots=True)
class Key:
    """One key of the file: its kind, bounds, choices, and whether it must be given."""

    kind: str
    minimum: float | None = None
    above_zero: bool = False
    choices: tuple[str, ...] = ()
    required: bool = False


#: `older_than` is purge's option on the command line, and selection for every rule here,
#: counted from the run's start (the policy clock).
OLDER_THAN = "older_than"
#: Selection options whose values are K=V pairs: a policy may give them as a mapping.
_PAIR_FLAGS = {"--property", "--param"}


def _selection_keys() -> dict[str, tuple[str, Key]]:
    """policy key → (build_selection keyword, Key), from the selection options' one declaration."""
    keys: dict[str, tuple[str, Key]] = {}
    for option in SELECTION_OPTIONS:
        key = option.flag.lstrip("-").replace("-", "_")
        if key == OLDER_THAN:
            continue
        kind = PAIRS if option.flag in _PAIR_FLAGS else STRINGS if option.repeatable else STR
        keys[key] = (option.keyword, Key(kind))
    return keys


#: Selection keys (`reason`, `where`, `body_regex`, ...) → the build_selection keyword each fills.
SELECTION_KEYS: dict[str, tuple[str, Key]] = _selection_keys()
#: Edit keys of `resubmit` (the edit options' field names: `set_property`, `set_ttl`, ...).
EDIT_KEYS: dict[str, Key] = {
    o.keyword: Key(PAIRS if o.keyword == "set_property" else STRINGS if o.repeatable else STR) for o in EDIT_OPTIONS
}

#: The tuning keys of the actions that move messages (`resubmit`, `purge`).
TUNING = {
    "max": Key(INT, minimum=1),
    "concurrency": Key(INT, minimum=1),
    "batch_size": Key(INT, minimum=1),
}
#: The keys of a rule other than its selection and its action.
RULE_KEYS: dict[str, Key] = {
    "name": Key(STR, required=True),
    "entities": Key(GLOBS, required=True),
    "stop_on_error": Key(BOOL),
}
#: The keys at the top of the file.
TOP_KEYS: dict[str, Key] = {"rules": Key("a list of rules", required=True), "stop_on_error": Key(BOOL)}


@dataclass(frozen=True)
class Rule:
    """One rule, checked: entity globs, selection, one action and its options."""

    name: str
    entities: tuple[str, ...]
    action: str
    options: Mapping[str, Any]
    #: build_selection keyword → value, and `older_than`, compiled at run time (durations are relative).
    selection: Mapping[str, Any] = field(default_factory=dict)
    older_than: str | None = None
    edits: CopyEdits = field(default_factory=CopyEdits)
    stop_on_error: bool = False
    #: `FILE:LINE:COL` of the rule, for messages.
    position: str = ""

    def option(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)

    @property
    def handler(self) -> PolicyAction:
        """The rule's action: its plan, its run, its report and its words (`policy/actions/`)."""
        from sbdlq.policy.actions import ACTIONS

        return ACTIONS[self.action]

    @property
    def deletes(self) -> bool:
        """Whether the rule may delete messages (purge, or resubmit with then: purge)."""
        return self.handler.deletes(self)


@dataclass(frozen=True)
class Policy:
    """A policy file, checked: its rules in file order."""

    path: str
    rules: tuple[Rule, ...]

    @property
    def deletes(self) -> bool:
        return any(rule.deletes for rule in self.rules)
