"""What a moving run (resubmit, purge, replay) did: its counts, its JSON and the words of its summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(slots=True)
class RunResult:
    """What a moving run (resubmit, purge, replay) did: the fields they share, their JSON and summary.

    Every selected message is in exactly one of the counts named by `ADDS_UP` (VERB's count,
    `failed`, `not_tried`, ...), so the figures of a summary and of the JSON add up to
    `selected`. A subclass names its own counts: `VERB` (the count the summary leads with),
    `JSON_COUNTS` (the fields between `selected` and `dry_run` in its JSON shape, DESIGN §4)
    and `SUMMARY_COUNTS` (the non-zero ones go in brackets after the summary line, with their
    `LABELS`, else the name with an underscore read as a space).
    """

    #: What the summary says was done (`resubmitted`); also the name of the field counting it.
    VERB: ClassVar[str] = ""
    #: What a dry run says would be done to the messages (default: VERB).
    DRY_RUN_VERB: ClassVar[str] = ""
    #: What the run's units are called in the line about leftovers.
    UNIT: ClassVar[str] = "message(s)"
    JSON_COUNTS: ClassVar[tuple[str, ...]] = ()
    SUMMARY_COUNTS: ClassVar[tuple[str, ...]] = ()
    LABELS: ClassVar[dict[str, str]] = {}
    #: The counts that share out `selected` between them (VERB's count is one).
    ADDS_UP: ClassVar[tuple[str, ...]] = ("failed", "not_tried", "left_beside_copy", "not_received")

    selected: int = 0
    #: Tried and not done (a copy refused, a send or delete that failed, a lock lost before the action).
    failed: int = 0
    #: Never tried: the run stopped first (a signal, a failure that ends the run) or ended before they
    #: came. Untouched, still in their queue: running the command again tries them.
    not_tried: int = 0
    #: Copied (resubmit: the copy was sent; purge: exported) but still in the DLQ: their complete
    #: failed or their lock was lost. Running the command again copies them again.
    left_beside_copy: int = 0
    #: Selected but never received, and not in the DLQ when the run ended: taken by another
    #: receiver, locked elsewhere, or gone (expired, deleted).
    not_received: int = 0
    #: Passed over by the selection (the plan's scan): with `selected`, what the scan read.
    not_matching: int = 0
    dry_run: bool = False
    elapsed_s: float = 0.0
    retries: int = 0
    errors: list[str] = field(default_factory=list)
    #: the selection took nothing of a DLQ that was not empty: the values nearest it (not in the JSON;
    #: the command says it on stderr, a policy run whose globs span many DLQs does not)
    hint: str | None = None
    #: Sequence numbers of the originals counted in left_beside_copy (for the advice line).
    left_sequences: list[int] = field(default_factory=list)
    #: Of those, the ones whose copy's send got no answer: the copy may or may not be in the target.
    unconfirmed_sequences: list[int] = field(default_factory=list)
    #: Why the run could not check that the others are still in the DLQ (None: it checked).
    unchecked_reason: str | None = None
    #: A dry run with edits: one message and its copy, before and after (see operations/edits.py).
    example: dict[str, Any] | None = None
    #: Private SDK shortcuts the backend gave up during the run, for the public SDK API (Service Bus).
    sdk_fallbacks: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        """Deprecated name of `not_matching`, kept in the JSON for one release."""
        return self.not_matching

    @property
    def done(self) -> int:
        """Messages the run moved or deleted: the field named by VERB."""
        return int(getattr(self, self.VERB))

    @done.setter
    def done(self, n: int) -> None:
        setattr(self, self.VERB, n)

    @property
    def left_unconfirmed(self) -> int:
        """Of left_beside_copy, the originals whose copy's send got no answer."""
        return len(self.unconfirmed_sequences)

    @property
    def left_unchecked(self) -> int:
        """Of left_beside_copy, the originals the end-of-run check could not look at (it failed)."""
        return self.left_beside_copy - self.left_unconfirmed if self.unchecked_reason is not None else 0

    def unaccounted(self) -> int:
        """Selected messages in none of the ADDS_UP counts yet (the run's accounting places them)."""
        return self.selected - self.done - sum(int(getattr(self, name)) for name in self.ADDS_UP)

    def to_json(self) -> dict[str, Any]:
        """The result's JSON shape of DESIGN §4."""
        doc = {
            "selected": self.selected,
            **{name: getattr(self, name) for name in self.JSON_COUNTS},
            "dry_run": self.dry_run,
            "elapsed_s": round(self.elapsed_s, 3),
            "sdk_fallbacks": list(self.sdk_fallbacks),
        }
        if self.example is not None:
            doc["example"] = self.example
        return doc

    def summary(self) -> str:
        """The one line a table-format run prints."""
        if self.dry_run:
            return f"dry run: {self.selected} message(s) would be {self.DRY_RUN_VERB or self.VERB}"
        text = f"{self.VERB} {self.done} of {self.selected} selected message(s) in {self.elapsed_s:.2f}s"
        extras = [
            f"{n} {self.LABELS.get(name) or name.replace('_', ' ')}"
            for name in self.SUMMARY_COUNTS
            if (n := getattr(self, name))
        ]
        return text + (f" ({', '.join(extras)})" if extras else "")

    def left_over(self) -> str | None:
        """The one stderr line about what the run left undone and what to do, or None when it
        left nothing that fails it. A line means exit 1 (DESIGN §4); `not_received` alone is not
        a failure (another receiver took them: the run's note says so)."""
        if self.dry_run:
            return None
        retry, beside = self.failed + self.not_tried, self.left_beside_copy
        if not (retry or beside):
            return self.extra_left_over(False) or None  # says it all: the first error is its cause again
        parts = [f"{retry} {self.UNIT} were not {self.VERB} and remain in the queue"] if retry else []
        if beside:
            parts.append(self.beside_line())
        if extra := self.extra_left_over(True):
            parts.append(extra)
        if retry and beside:
            parts.append(self.retry_beside_advice())
        else:
            parts.append(self.retry_advice() if retry else self.beside_advice())
        cause = f"{self.errors[0]}; " if self.errors else ""
        return cause + "; ".join(parts)

    def extra_left_over(self, others: bool) -> str:
        """A subclass's own clause about what stays (resubmit: unroutable copies); '' for none."""
        return ""

    def retry_advice(self) -> str:
        return "run the command again to retry"

    def beside_line(self) -> str:
        unconfirmed = set(self.unconfirmed_sequences)
        sent = [s for s in self.left_sequences if s not in unconfirmed]
        parts = []
        if self.left_beside_copy > self.left_unconfirmed:
            count = self.left_beside_copy - self.left_unconfirmed
            if self.unchecked_reason is not None:
                parts.append(
                    f"{count} original(s) may have stayed in the queue after their copy was sent"
                    f"{self._listed(sent)}: the check of the queue failed too ({self.unchecked_reason}), so their "
                    "state is unknown (see peek --sequence)"
                )
            else:
                parts.append(f"{count} original(s) stayed in the queue after their copy was sent{self._listed(sent)}")
        if self.left_unconfirmed:
            # Their copy may never have reached the target: purged unchecked, the message would be lost.
            parts.append(
                f"{self.left_unconfirmed} original(s) stayed in the queue after a send that got no answer"
                f"{self._listed(self.unconfirmed_sequences)}: their copy may have reached the target: check the "
                "target for their message ids before purging them"
            )
        return "; ".join(parts)

    def beside_advice(self) -> str:
        return "check the target before resubmitting them again"

    def retry_beside_advice(self) -> str:
        if self.left_unconfirmed:
            return (
                "running the command again would send those originals a second time: purge (purge --sequence) "
                "only those whose copy is in the target, then run the command again"
            )
        return (
            "running the command again would send those originals a second time: check the target, "
            "purge them (purge --sequence), then run the command again"
        )

    def _listed(self, sequences: list[int] | None = None) -> str:
        """The left-over originals' sequence numbers, as --sequence ranges (the first few)."""
        sequences = self.left_sequences if sequences is None else sequences
        if not sequences:
            return ""
        ranges = sequence_ranges(sequences)
        shown = ", ".join(ranges[:SHOWN_RANGES]) + (", ..." if len(ranges) > SHOWN_RANGES else "")
        return f" (sequence numbers {shown})"


#: Ranges of sequence numbers an advice line names before it says "...".
SHOWN_RANGES = 10


def sequence_ranges(numbers: list[int]) -> list[str]:
    """Sequence numbers as the fewest ranges --sequence takes: [1, 2, 3, 7] -> ["1-3", "7"]
    (advice lines, and the console's marked messages as a filter)."""
    out: list[str] = []
    ordered = sorted(set(numbers))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return out


@dataclass(slots=True)
class CopyingResult(RunResult):
    """What a run sending copies did (resubmit, replay): its JSON counts follow the VERB field."""

    SUMMARY_COUNTS: ClassVar[tuple[str, ...]] = (
        "failed",
        "not_tried",
        "left_beside_copy",
        "not_received",
        "not_matching",
        "unroutable",
        "retries",
    )
    LABELS: ClassVar[dict[str, str]] = {"left_beside_copy": "left beside their copy"}
    ADDS_UP: ClassVar[tuple[str, ...]] = (*RunResult.ADDS_UP, "unroutable")

    #: Copies no subscription of the target topic would take: not sent (originals left in the DLQ).
    unroutable: int = 0
    #: A targeted run (`--only-this-subscription`, `--only-subscription`): the subscriptions that may
    #: hold copies meant for the targeted one, each `subscription`, `at_most`, `cause` (STRAY_CAUSES).
    stray_copies: list[dict[str, Any]] = field(default_factory=list)
    #: The targeted subscription (TOPIC/Subscriptions/SUB) the stray copies were meant for.
    stray_target: str = ""
    #: --spread: the spread's id, window and each scheduled copy (DESIGN §4); None: sent now
    spread: dict[str, Any] | None = None

    def summary(self) -> str:
        text = RunResult.summary(self)
        s = self.spread
        if s is None or self.dry_run:
            return text
        return (
            f"{text}; spread {s['id']}: {s['scheduled']} copies scheduled from {s['start']} to {s['end']} "
            f"(sbdlq spread status {s['id']})"
        )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super(CopyingResult, cls).__init_subclass__(**kwargs)  # explicit: see EntityReasonGroup
        if "JSON_COUNTS" in cls.__dict__:
            return  # a subclass that names its own
        # `skipped` repeats `not_matching` for one release (deprecated, see CHANGELOG).
        cls.JSON_COUNTS = (
            cls.VERB,
            "failed",
            "not_tried",
            "left_beside_copy",
            "left_unconfirmed",
            "left_unchecked",
            "not_received",
            "not_matching",
            "skipped",
            "unroutable",
        )

    def to_json(self) -> dict[str, Any]:
        doc = RunResult.to_json(self)
        if self.stray_copies:
            doc["stray_copies"] = [dict(s) for s in self.stray_copies]
        if self.spread is not None:
            doc["spread"] = self.spread
        return doc

    def set_strays(self, strays: list[Any], target: str) -> None:
        """Record what a targeted run's checks could not confirm (target_watch.Stray objects)."""
        self.stray_copies = [s.to_json() for s in strays]
        self.stray_target = target

    def extra_left_over(self, others: bool) -> str:
        parts = [self.stray_line()] if self.stray_copies else []
        if not self.unroutable:
            return "; ".join(parts)
        if others:
            parts.append(
                f"{self.unroutable} more were not sent: no subscription of the target would receive their copy"
            )
        else:
            parts.append(
                f"{self.unroutable} {self.UNIT} were not {self.VERB} because no subscription of the target would "
                "receive their copy; they remain in the queue (check the topic's subscription rules)"
            )
        return "; ".join(parts)

    def stray_line(self) -> str:
        """Where copies meant for one subscription may have gone instead, and at most how many."""
        target = self.stray_target
        sub = target.rsplit("/", 1)[-1]
        elsewhere = [s for s in self.stray_copies if s["cause"] != "missed"]
        parts = []
        if elsewhere:
            listed = ", ".join(
                f"{s['subscription']} (at most {s['at_most']}: {STRAY_CAUSES[s['cause']]})" for s in elsewhere
            )
            parts.append(
                f"copies meant only for {target} may also be in subscription(s) {listed}; they carry sbdlq-target={sub}"
            )
        parts += [
            f"up to {s['at_most']} copies may have missed {target} ({STRAY_CAUSES[s['cause']]})"
            for s in self.stray_copies
            if s["cause"] == "missed"
        ]
        return "; ".join(parts)


#: Why a targeted run's copies may be in another subscription (a stray's `cause`, DESIGN §4).
STRAY_CAUSES = {
    "created": "created during the run",
    "changed": "its targeted routing changed during the run",
    "unverified": "the topic's rules could not be read again after the copies were sent",
    "missed": "its targeted routing changed during the run",
}


@dataclass(slots=True)
class ResubmitResult(CopyingResult):
    """What a resubmit run did."""

    VERB: ClassVar[str] = "resubmitted"

    resubmitted: int = 0


@dataclass(slots=True)
class PurgeResult(RunResult):
    """What a purge run did."""

    VERB: ClassVar[str] = "purged"
    DRY_RUN_VERB: ClassVar[str] = "deleted"
    JSON_COUNTS: ClassVar[tuple[str, ...]] = (
        "purged",
        "exported",
        "failed",
        "not_tried",
        "left_beside_copy",
        "left_unchecked",
        "not_received",
        "not_matching",
    )
    SUMMARY_COUNTS: ClassVar[tuple[str, ...]] = (
        "exported",
        "failed",
        "not_tried",
        "left_beside_copy",
        "not_received",
        "not_matching",
        "retries",
    )
    LABELS: ClassVar[dict[str, str]] = {"left_beside_copy": "exported but not deleted"}

    purged: int = 0
    exported: int = 0

    def beside_line(self) -> str:
        if self.unchecked_reason is not None:
            return (
                f"{self.left_beside_copy} message(s) were exported and may have stayed in the queue{self._listed()}: "
                f"the check of the queue failed too ({self.unchecked_reason}), so their state is unknown"
            )
        return f"{self.left_beside_copy} message(s) were exported but stayed in the queue{self._listed()}"

    def beside_advice(self) -> str:
        return (
            "they are in the export file, marked not deleted (replay holds them back); purging them again "
            "exports them again (replay sends the later record)"
        )

    def retry_beside_advice(self) -> str:
        return "run the command again to retry (the ones already exported are exported again)"


@dataclass(slots=True)
class ReplayResult(CopyingResult):
    """What a replay run did."""

    VERB: ClassVar[str] = "replayed"
    UNIT: ClassVar[str] = "record(s)"
    # A file's records have no originals to leave beside a copy, nor another receiver to take them.
    JSON_COUNTS: ClassVar[tuple[str, ...]] = (
        "replayed",
        "failed",
        "not_tried",
        "unconfirmed",
        "not_matching",
        "skipped",
        "unroutable",
        "held_back",
        "repeated",
    )
    SUMMARY_COUNTS: ClassVar[tuple[str, ...]] = (
        "failed",
        "not_tried",
        "unconfirmed",
        "not_matching",
        "unroutable",
        "held_back",
        "repeated",
        "retries",
    )
    ADDS_UP: ClassVar[tuple[str, ...]] = (*CopyingResult.ADDS_UP, "unconfirmed")
    LABELS: ClassVar[dict[str, str]] = {
        "held_back": "held back: delete not confirmed",
        "repeated": "exported again later in the file",
    }

    replayed: int = 0
    #: Sent, but the send got no answer (a cut connection, a timeout): the copy may be in the
    #: target or not. Never sent again in the run; `--resume` would send it again.
    unconfirmed: int = 0
    #: Matching records a `purge --export` wrote but never marked deleted (a kill between export and
    #: delete, a lock lost): they may still be in the DLQ, so they are not sent (not in `selected`)
    #: unless --include-held-back.
    held_back: int = 0
    #: Matching records never marked deleted whose message the file holds again further on (a rerun
    #: exported it again): the later record is the one sent.
    repeated: int = 0
    #: The sequence numbers of the records held back, for the advice line.
    held_back_sequences: list[int] = field(default_factory=list)

    def left_over(self) -> str | None:
        """Records not sent (no originals: a file is never changed): fix the cause, resume; records sent
        without an answer: check the target first; records held back because their delete was never
        confirmed: check the DLQ first; copies a targeted replay may have put in another subscription."""
        strays = self.stray_line() if self.stray_copies and not self.dry_run else ""
        if self.dry_run or not (self.failed or self.not_tried or self.unroutable or self.unconfirmed or self.held_back):
            return strays or None
        cause = f"{self.errors[0]}; " if self.errors else ""
        parts = []
        if left := self.failed + self.not_tried + self.unroutable:
            also = f"; {strays}" if strays else ""
            parts.append(
                f"{left} record(s) were not replayed{also}; fix the cause and rerun with --resume to send only those"
            )
        elif strays:
            parts.append(strays)
        if self.unconfirmed:
            parts.append(
                f"{self.unconfirmed} record(s) were sent without an answer: their copy may be in the target, "
                "and --resume would send them again (check the target first)"
            )
        if self.held_back:
            ranges = sequence_ranges(self.held_back_sequences)
            shown = ", ".join(ranges[:SHOWN_RANGES]) + (", ..." if len(ranges) > SHOWN_RANGES else "")
            parts.append(
                f"{self.held_back} record(s) were not sent: the purge that exported them did not confirm their "
                f"delete, so they may still be in the DLQ (sequence numbers {shown}); check it "
                "(`sbdlq peek ENTITY --sequence ...`); to send them, rerun with --resume --include-held-back"
            )
        return cause + "; ".join(parts)
