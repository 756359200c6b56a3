"""The selection options (DESIGN §5): declared once (`SELECTION_OPTIONS`), compiled into one predicate.

`SELECTION_OPTIONS` is the one list: the commands' option group (cli/options.py), the console's
filter line (ui/filterline.py) and the docs test read it. Each entry names the
`build_selection` keyword its value is passed as.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sbdlq.errors import BadInput
from sbdlq.models import attempt_of
from sbdlq.timeparse import parse_time

if TYPE_CHECKING:
    from sbdlq.messages import Message  # annotations only: `count` makes no Message

#: How long --body-regex may take on one body before the run fails: a pattern that needs longer
#: is backtracking catastrophically (`(a|aa)+$`), and would hold the run for minutes.
REGEX_BUDGET_S = 1.0


class BodyRegex:
    """--body-regex: Python syntax, on an engine with a time budget that Ctrl-C can interrupt.

    The standard `re` holds the GIL while it backtracks and never looks at signals, so
    neither a timer nor Ctrl-C can stop it. The `regex` package (re-compatible in its
    default V0 mode) checks signals while matching and takes a `timeout`.
    """

    def __init__(self, pattern: str) -> None:
        try:
            # `re` is the judge of the syntax: the option promises a Python regular expression,
            # and its messages are the ones Python users know.
            re.compile(pattern)
        except re.error as exc:
            raise BadInput(f"invalid --body-regex {pattern!r}: {exc}") from None
        import regex

        self.pattern = pattern
        self._compiled = regex.compile(pattern)

    def search(self, text: str, sequence_number: int = 0) -> bool:
        """Whether the pattern occurs in `text`; BadInput when it takes longer than the budget."""
        try:
            found = self._compiled.search(text, timeout=REGEX_BUDGET_S) is not None
        except TimeoutError:
            raise BadInput(
                f"--body-regex {self.pattern!r} took more than {REGEX_BUDGET_S:g}s on message {sequence_number}",
                hint="simplify it: nested repetition such as (a|aa)+ backtracks without end",
            ) from None
        _stop_if_cancelled()
        return found


def _stop_if_cancelled() -> None:
    """Honour a Ctrl-C that arrived during a long match: asyncio only cancels at the next await."""
    import asyncio

    try:
        task = asyncio.current_task()
    except RuntimeError:
        return  # not inside an event loop
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


@dataclass(frozen=True)
class SelectionOption:
    """One selection option: its flag, the `build_selection` keyword it fills, its help."""

    flag: str
    keyword: str
    help: str
    #: given several times, its values are a list (any one matches, or each range)
    repeatable: bool = False


_TIME_HELP = "ISO 8601 time, or a duration ago (2h, 3d)."

#: Every selection option, in the order --help shows them. Every command that selects takes all.
SELECTION_OPTIONS: tuple[SelectionOption, ...] = (
    SelectionOption("--reason", "reasons", "Dead-letter reason (repeatable, case-insensitive).", repeatable=True),
    SelectionOption("--description-contains", "description_contains", "Text in the dead-letter description."),
    SelectionOption(
        "--fingerprint",
        "fingerprints",
        "Fingerprint id from inspect-reason --by fingerprint, or a prefix of 4+ of its hex digits (repeatable).",
        repeatable=True,
    ),
    SelectionOption("--subject", "subject", "Exact subject (label)."),
    SelectionOption("--property", "properties", "Application property K=V (repeatable).", repeatable=True),
    SelectionOption("--enqueued-before", "enqueued_before", _TIME_HELP),
    SelectionOption("--enqueued-after", "enqueued_after", _TIME_HELP),
    SelectionOption("--older-than", "older_than", "Enqueued more than this long ago (7d)."),
    SelectionOption("--sequence", "sequences", "Sequence numbers: N, N-M, N-, -M (repeatable).", repeatable=True),
    SelectionOption("--body-contains", "body_contains", "Text in the body."),
    SelectionOption("--body-regex", "body_regex", "Python regular expression on the body."),
    SelectionOption("--where", "where", "Service Bus SQL filter, e.g. \"sys.Label = 'orders' AND tenant = 'eu'\"."),
    SelectionOption(
        "--param",
        "where_parameters",
        "A value for @NAME in --where: NAME=VALUE (repeatable; typed like --set-property: 42 a number, "
        "true a boolean, '\"42\"' a string).",
        repeatable=True,
    ),
)


#: The largest sequence number Service Bus hands out (a signed 64-bit integer).
MAX_SEQUENCE = 2**63 - 1


@dataclass
class Selection:
    """All criteria combine with AND; an empty selection takes everything."""

    reasons: list[str] = field(default_factory=list)
    description_contains: str | None = None
    #: fingerprint ids or prefixes (sbdlq/fingerprint.py), lower case: any one matches
    fingerprints: list[str] = field(default_factory=list)
    subject: str | None = None
    properties: list[tuple[str, str]] = field(default_factory=list)
    enqueued_before: datetime | None = None
    enqueued_after: datetime | None = None
    sequences: list[tuple[int, int]] = field(default_factory=list)
    body_contains: str | None = None
    body_regex: BodyRegex | None = None
    where: Any = None  # sbdlq.sqlfilter.compiled.SqlFilter
    #: --where's property names compared with another property (`tenant = eu`: a bare `eu` is a name)
    where_bare_names: tuple[str, ...] = ()
    #: `apply`'s max_attempts: messages whose `sbdlq-attempt` is below this (to resubmit) ...
    attempts_below: int | None = None
    #: ... or at least this (reached it: for the rule's `then`). No command option sets these.
    attempts_from: int | None = None

    @property
    def is_empty(self) -> bool:
        """True when nothing narrows the selection (`--subject ""` does: it means no subject)."""
        return not (self.reasons or self.properties or self.sequences or self.fingerprints) and all(
            v is None
            for v in (
                self.description_contains,
                self.subject,
                self.enqueued_before,
                self.enqueued_after,
                self.body_contains,
                self.body_regex,
                self.where,
                self.attempts_below,
                self.attempts_from,
            )
        )

    @property
    def first_sequence(self) -> int:
        """Where a scan may start: nothing below the lowest --sequence can match."""
        return min((lo for lo, _ in self.sequences), default=0)

    @property
    def last_sequence(self) -> int | None:
        """Where a scan may stop: nothing above the highest --sequence can match."""
        return max((hi for _, hi in self.sequences), default=None)

    def matches(self, m: Message) -> bool:
        """True when the message meets every criterion."""
        if self.sequences and not any(lo <= m.sequence_number <= hi for lo, hi in self.sequences):
            return False
        if self.attempts_below is not None or self.attempts_from is not None:
            attempt = attempt_of(m.application_properties)
            if self.attempts_below is not None and attempt >= self.attempts_below:
                return False
            if self.attempts_from is not None and attempt < self.attempts_from:
                return False
        if self.reasons:
            reason = (m.dead_letter_reason or "").casefold()
            if reason not in self._reasons_folded:
                return False
        if self.description_contains is not None:
            desc = (m.dead_letter_error_description or "").casefold()
            if self.description_contains.casefold() not in desc:
                return False
        if self.fingerprints:
            from sbdlq.fingerprint import message_fingerprint

            if not message_fingerprint(m).id.startswith(tuple(self.fingerprints)):
                return False
        if self.subject is not None and (m.subject or "") != self.subject:
            return False
        for key, value in self.properties:
            if key not in m.application_properties or _text(m.application_properties[key]) != value:
                return False
        if self.enqueued_before is not None and not m.enqueued_time < self.enqueued_before:
            return False
        if self.enqueued_after is not None and not m.enqueued_time > self.enqueued_after:
            return False
        if self.body_contains is not None or self.body_regex is not None:
            text = m.body.decode("utf-8", errors="replace")
            if self.body_contains is not None and self.body_contains not in text:
                return False
            if self.body_regex is not None and not self.body_regex.search(text, m.sequence_number):
                return False
        if self.where is not None:
            from sbdlq.sqlfilter import FilterEvaluationError, message_context

            system, props = message_context(m)
            try:
                return bool(self.where.matches(system, props))
            except FilterEvaluationError:
                # A message the expression cannot evaluate is not selected, as a rule skips it.
                return False
        return True

    @property
    def _reasons_folded(self) -> set[str]:
        return {r.casefold() for r in self.reasons}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_property(text: str) -> tuple[str, str]:
    """`K=V` → (K, V)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise BadInput(f"invalid --property {text!r}", hint="use NAME=VALUE")
    return key.strip(), value


def parse_sequence_range(text: str) -> tuple[int, int]:
    """`5-90`, `5-`, `-90` or `42` → an inclusive range."""
    raw = text.strip()
    m = re.fullmatch(r"(\d*)\s*-\s*(\d*)", raw)
    try:
        if m and (m.group(1) or m.group(2)):
            lo = int(m.group(1)) if m.group(1) else 0
            hi = int(m.group(2)) if m.group(2) else MAX_SEQUENCE
        else:
            lo = hi = int(raw)
    except ValueError:
        raise BadInput(f"invalid --sequence {text!r}", hint="use N, N-M, N- or -M")
    if lo > hi or lo < 0:
        raise BadInput(f"invalid --sequence {text!r}: the range is empty")
    if hi > MAX_SEQUENCE:
        raise BadInput(f"invalid --sequence {text!r}: sequence numbers go up to {MAX_SEQUENCE}")
    return lo, hi


def build_selection(
    *,
    reasons: list[str] | None = None,
    description_contains: str | None = None,
    fingerprints: list[str] | None = None,
    subject: str | None = None,
    properties: list[str] | None = None,
    enqueued_before: str | None = None,
    enqueued_after: str | None = None,
    sequences: list[str] | None = None,
    body_contains: str | None = None,
    body_regex: str | None = None,
    where: str | None = None,
    where_parameters: list[str] | None = None,
    older_than: str | None = None,
    now: datetime | None = None,
) -> Selection:
    """Compile CLI option values, each bad one rejected with a line naming the option."""
    from sbdlq.fingerprint import parse_fingerprint_id

    sel = Selection(
        fingerprints=[parse_fingerprint_id(f) for f in fingerprints or []],
        reasons=list(reasons or []),
        description_contains=description_contains,
        subject=subject,
        properties=[parse_property(p) for p in properties or []],
        sequences=[parse_sequence_range(s) for s in sequences or []],
        body_contains=body_contains,
    )
    if enqueued_before:
        sel.enqueued_before = parse_time(enqueued_before, what="--enqueued-before", now=now)
    if enqueued_after:
        sel.enqueued_after = parse_time(enqueued_after, what="--enqueued-after", now=now)
    if older_than:
        from sbdlq.timeparse import ago, parse_duration

        seconds = parse_duration(older_than, what="--older-than")
        cutoff = ago(seconds, what="--older-than", text=older_than, now=now)
        if sel.enqueued_before is None or cutoff < sel.enqueued_before:
            sel.enqueued_before = cutoff
    if body_regex is not None:
        sel.body_regex = BodyRegex(body_regex)
    parameters = parse_where_parameters(where_parameters or [])
    if parameters and where is None:
        raise BadInput("--param gives a value to a @name of --where: it needs --where")
    if where is not None:
        from sbdlq.sqlfilter import SqlFilterSyntaxError, compile_filter

        try:
            sel.where = compile_filter(where, parameters)
        except SqlFilterSyntaxError as exc:
            raise BadInput(f"invalid --where expression: {exc.message}", hint=_where_hint(exc.message))
        from sbdlq.sqlfilter.names import compared_names

        sel.where_bare_names = compared_names(where, parameters)
    return sel


def parse_where_parameters(texts: list[str]) -> dict[str, Any]:
    """`--param NAME=VALUE`s as the filter's parameters (`@NAME` → value), each name once.

    VALUE is typed as `--set-property` and `emulator send --property` type it: `42` a number,
    `true` a boolean, `'"42"'` a string, anything else text.
    """
    from sbdlq.models import fits_int64
    from sbdlq.property_values import typed_value

    parameters: dict[str, Any] = {}
    for text in texts:
        name, sep, raw = text.partition("=")
        name = name.strip()
        if not sep or not name.lstrip("@"):
            raise BadInput(f"invalid --param {text!r}", hint="use NAME=VALUE, for @NAME in --where")
        key = name if name.startswith("@") else f"@{name}"
        if any(k.casefold() == key.casefold() for k in parameters):
            raise BadInput(f"--param {key} is given twice")
        value = typed_value(raw)
        if isinstance(value, int) and not isinstance(value, bool) and not fits_int64(value):
            raise BadInput(f"--param {text!r}: {raw} is past the 64-bit range of a SQL filter's integers")
        parameters[key] = value
    return parameters


# Properties the broker sets on dead-lettering as application properties, not system ones.
_DEAD_LETTER_PROPERTIES = ("DeadLetterReason", "DeadLetterErrorDescription")


def _where_hint(message: str) -> str | None:
    """What the operator probably meant by an unknown `sys.` name, or None."""
    from sbdlq.nearest import closest
    from sbdlq.sqlfilter.sysprops import SYSTEM_PROPERTIES

    m = re.search(r"unknown system property 'sys\.([^']*)'", message)
    if m is None:
        return None
    name = m.group(1)
    for prop in _DEAD_LETTER_PROPERTIES:
        if name.lower() == prop.lower():
            return f"{prop} is an application property: write {prop}"
    near = closest(name, [*SYSTEM_PROPERTIES, "Subject"], n=1)
    return f"did you mean sys.{near[0]}?" if near else None
