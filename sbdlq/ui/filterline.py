"""The messages pane's filter line: the selection options of the commands, typed as text."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from sbdlq.errors import BadInput
from sbdlq.results import sequence_ranges
from sbdlq.selection import SELECTION_OPTIONS, Selection, build_selection

# flag -> (build_selection keyword, repeatable), read from the one declaration
FLAGS: dict[str, tuple[str, bool]] = {o.flag: (o.keyword, o.repeatable) for o in SELECTION_OPTIONS}


@dataclass(frozen=True)
class Filter:
    """A parsed filter line: `build_selection` keywords, checked by compiling them once."""

    text: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def compile(self, *, marked: list[int] | None = None) -> Selection:
        """The selection; with `marked`, only those sequence numbers (the filter's own --sequence dropped)."""
        options = dict(self.options)
        if marked is not None:
            options["sequences"] = sequence_ranges(marked)
        return build_selection(**options)

    @property
    def is_empty(self) -> bool:
        return not self.options


def parse_filter(text: str) -> Filter:
    """`--reason X --where "..."` as a Filter; BadInput naming the problem."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise BadInput(f"filter: {exc}") from None
    options: dict[str, Any] = {}
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        if flag not in FLAGS:
            raise BadInput(f"filter: unknown option {words[i]!r}", hint="use the selection options, e.g. --reason X")
        if not eq:
            i += 1
            if i >= len(words):
                raise BadInput(f"filter: {flag} needs a value")
            value = words[i]
        key, repeatable = FLAGS[flag]
        if repeatable:
            options.setdefault(key, []).append(value)
        else:
            options[key] = value
        i += 1
    result = Filter(text.strip(), options)
    result.compile()  # reject a bad value now, not at the first page
    return result


def reason_filter(reason: str) -> str:
    """The filter line that selects one reason of the reasons pane."""
    if reason == "(none)":
        return '--where "NOT EXISTS(DeadLetterReason)"'
    return "--reason " + shlex.quote(reason)


def fingerprint_filter(fingerprint: str) -> str:
    """The filter line that selects one group of the fingerprints pane."""
    return "--fingerprint " + shlex.quote(fingerprint)
