"""The policy file's shape: the one owner of its keys, their types, and the typed rules they make.

The selection keys are not a second list: they are read off the selection options the commands
declare (`selection.SELECTION_OPTIONS`, `--description-contains` → `description_contains`), and
the edit keys off the edit options (`operations/edits.EDIT_OPTIONS`), so a selection or edit option added there is a
policy key too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sbdlq.operations.edits import EDIT_OPTIONS, CopyEdits
from sbdlq.selection import SELECTION_OPTIONS

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

_TUNING = {
    "max": Key(INT, minimum=1),
    "concurrency": Key(INT, minimum=1),
    "batch_size": Key(INT, minimum=1),
}
#: What `then` may do with a message that reached `max_attempts`.
THEN_KEEP, THEN_PURGE = "keep", "purge"
#: Each action's keys.
ACTIONS: dict[str, dict[str, Key]] = {
    "resubmit": {
        "to": Key(STR),
        "max_attempts": Key(INT, minimum=1),
        "then": Key(CHOICE, choices=(THEN_KEEP, THEN_PURGE)),
        "export": Key(PATH),
        "new_message_id": Key(BOOL),
        "keep_dead_letter_properties": Key(BOOL),
        "fan_out": Key(BOOL),
        "only_this_subscription": Key(BOOL),
        "allow_unverified_routing": Key(BOOL),
        "rate": Key(NUMBER, above_zero=True),
        "spread": Key(DURATION),
        **_TUNING,
        **EDIT_KEYS,
    },
    "purge": {"export": Key(PATH), **_TUNING},
    "alert": {"above": Key(INT, minimum=0, required=True)},
}
#: The keys of a rule other than its selection and its action.
RULE_KEYS: dict[str, Key] = {
    "name": Key(STR, required=True),
    "entities": Key(GLOBS, required=True),
    "stop_on_error": Key(BOOL),
}
#: The keys at the top of the file.
TOP_KEYS: dict[str, Key] = {"rules": Key("a list of rules", required=True), "stop_on_error": Key(BOOL)}
#: Actions that may delete messages: they need --yes off a terminal.
DELETES = "purge"


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
    def deletes(self) -> bool:
        """Whether the rule may delete messages (purge, or resubmit with then: purge)."""
        return self.action == DELETES or self.option("then") == THEN_PURGE


@dataclass(frozen=True)
class Policy:
    """A policy file, checked: its rules in file order."""

    path: str
    rules: tuple[Rule, ...]

    @property
    def deletes(self) -> bool:
        return any(rule.deletes for rule in self.rules)
