"""The nearest values that exist, for mistakes that look like success (DESIGN §4 "Hints").

A typo in `--reason` matches nothing and exits 0; a misspelt entity is "not found". These say
what was probably meant: the closest names (difflib's ratio, case-insensitive) among those
that exist. Pure functions and a bounded collector; the callers decide when to speak. Every
"did you mean" of sbdlq goes through `closest` (a command's option, a profile key, a policy key,
a `sys.` name, an entity, a reason).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sbdlq.models import Message
    from sbdlq.selection import Selection

#: Distinct values kept per kind while a scan passes messages over: a DLQ of unique
#: descriptions must not grow the collector without bound.
MAX_VALUES = 2000
#: How close a name must be to be offered (difflib's ratio).
CUTOFF = 0.6


def closest(word: str, names: Iterable[str], n: int = 3) -> list[str]:
    """The names closest to `word`, closest first, ignoring case (each name as it is spelt)."""
    by_folded: dict[str, str] = {}
    for name in names:
        by_folded.setdefault(name.casefold(), name)
    found = difflib.get_close_matches(word.casefold(), list(by_folded), n=n, cutoff=CUTOFF)
    return [by_folded[f] for f in found]


def or_list(names: list[str]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


# ---------------------------------------------------------------------- entities

_QUOTED = re.compile(r"'([^']+)'")
_BEFORE_NOT_FOUND = re.compile(r"(\S+) not found")
_SUB_QUEUE = re.compile(r"/\$(?:Transfer/)?\$?DeadLetterQueue$", re.IGNORECASE)


def entity_hint(message: str, paths: list[str]) -> str | None:
    """`did you mean orders?` for the entity a not-found message names, from the namespace's paths."""
    named = _QUOTED.findall(message) or _BEFORE_NOT_FOUND.findall(message)
    existing = {p.casefold() for p in paths}
    for name in named:
        name = _SUB_QUEUE.sub("", name)
        if name.casefold() in existing:
            continue  # the topic of a missing subscription exists: not the misspelt part
        near = _closest_path(name, paths)
        if near:
            return f"did you mean {or_list(near)}?"
    return None


def _closest_path(name: str, paths: list[str]) -> list[str]:
    """A subscription is compared by its name among its topic's (their shared prefix is no likeness)."""
    topic, sep, sub = name.partition("/")
    if sep and sub.casefold().startswith("subscriptions/"):
        prefix = f"{topic}/Subscriptions/".casefold()
        subs = {p[len(prefix) :]: p for p in paths if p.casefold().startswith(prefix)}
        if subs:
            return [subs[s] for s in closest(sub.split("/", 1)[1], subs)]
    return closest(name, paths)


# ---------------------------------------------------------------------- selections


class PassedOver:
    """What a scan passed over, kept only for the criteria the selection has (each bounded).

    Called with each message the selection did not take; `hint()` then names the values that
    exist nearest to what was asked for, when nothing was taken.
    """

    def __init__(self, selection: Selection) -> None:
        self.selection = selection
        self.count = 0
        self.reasons: Counter[str] = Counter()
        self.subjects: Counter[str] = Counter()
        self.fingerprints: Counter[str] = Counter()
        #: the bare names of --where not yet seen as a property of any message
        self.unseen_names: dict[str, str] = {n.casefold(): n for n in selection.where_bare_names}

    def __call__(self, m: Message) -> None:
        self.count += 1
        sel = self.selection
        if sel.reasons:
            _add(self.reasons, m.dead_letter_reason or "")
        if sel.subject is not None:
            _add(self.subjects, m.subject or "")
        if sel.fingerprints:
            from sbdlq.fingerprint import message_fingerprint

            _add(self.fingerprints, message_fingerprint(m).id)
        if self.unseen_names:
            for key in m.application_properties:
                self.unseen_names.pop(key.casefold(), None)

    def hint(self) -> str | None:
        """One line naming what exists nearest to the selection, or None when there is nothing to say."""
        if not self.count:
            return None
        sel = self.selection
        parts: list[str] = []
        for given in sel.reasons:
            parts.extend(_nearest("--reason", given, self.reasons))
        if sel.subject is not None:
            parts.extend(_nearest("--subject", sel.subject, self.subjects))
        for given in sel.fingerprints:
            parts.extend(_nearest("--fingerprint", given, self.fingerprints))
        for name in self.unseen_names.values():
            parts.append(
                f"--where names {name}, which is no property of any message read: quote a text value ('{name}')"
            )
        if not parts:
            return None
        return f"no message matched the selection ({self.count} read); " + "; ".join(parts)


def _add(counter: Counter[str], value: str) -> None:
    if value in counter or len(counter) < MAX_VALUES:
        counter[value] += 1


def _nearest(flag: str, given: str, seen: Counter[str]) -> list[str]:
    """`--reason X: nearest Y (203)`, or the commonest values when none is near."""
    if not seen:
        return []
    shown = [v for v in seen if v]
    if flag == "--fingerprint":
        near = [v for v in shown if v.startswith(given[:2])][:3] or closest(given, shown)
    else:
        near = closest(given, shown)
    if near:
        return [f"{flag} {given!r}: nearest {_counted(near, seen)}"]
    common = [v for v, _ in seen.most_common(3) if v]
    return [f"{flag} {given!r}: none near; here: {_counted(common, seen)}"] if common else []


def _counted(values: list[str], seen: Counter[str]) -> str:
    return ", ".join(f"{v} ({seen[v]})" for v in values)
