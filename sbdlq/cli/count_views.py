"""How `count` shows its counts: once (any -o, prometheus too) or watched (`--watch`).

`count --watch 5s` redraws one table in place on a terminal (Rich Live) until Ctrl-C. Off
a terminal it writes one snapshot per interval, flushed, as `watch`/`kubectl get -w` users
expect in a log: with `-o table` a line `Every 5s: <UTC time>` then the table, with
`-o jsonl` one object per entity per snapshot with a `time` field first, with `-o tsv` the
time as the first column. With `--fail-above N` the watch stops at the first snapshot over
N and exits 3 (wait for trouble); Ctrl-C ends it with status 130 and no message.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import datetime

import typer

from sbdlq import terminal
from sbdlq.addresses import EntityPath, SubQueue
from sbdlq.cli import reporting
from sbdlq.cli.error_path import handled
from sbdlq.cli.settings import Settings, output_format
from sbdlq.cli.target import open_target
from sbdlq.errors import BadInput, ExitStatus, ThresholdExceeded
from sbdlq.models import COUNT_NAMES, Counts, iso
from sbdlq.output import report_tables
from sbdlq.output.render import Query

#: The count table's columns: the entity, then every count (models.COUNT_FIELDS).
COLUMNS = ("entity", *COUNT_NAMES)


def count_format(s: Settings, given: str | None, q: Query | None) -> str:
    """-o for count: every command's formats, and those offered to count by name (prometheus: no --query there)."""
    from sbdlq.output.formats import offered_by_name

    own = offered_by_name("count", given)
    if own is None:
        return output_format(s, given)
    if q is not None and not own.takes_query:
        raise BadInput(f"--query does not apply to -o {own.name}", hint="use -o json with --query")
    return own.name


def show_counts(counts: Sequence[Counts], fmt: str, q: Query | None) -> None:
    """One snapshot, as `count` prints it without --watch."""
    from sbdlq.output.formats import FORMATS, write_document

    if FORMATS[fmt].metrics:
        from sbdlq.output.prometheus import gauges

        write_document(gauges(counts), fmt)
        return
    report_tables.emit_list([c.to_json() for c in counts], fmt, list(COLUMNS), q)


def check_threshold(ctx: typer.Context, counts: Sequence[Counts], sub_queue: SubQueue, fail_above: int) -> None:
    """Exit 3 naming the fullest queue when any holds more than `fail_above` messages."""
    from sbdlq.operations.browse import dlq_count

    over = [c for c in counts if dlq_count(c, sub_queue) > fail_above]
    if over:
        worst = max(over, key=lambda c: dlq_count(c, sub_queue))
        with handled(ctx):
            raise ThresholdExceeded(
                f"{worst.entity}: {dlq_count(worst, sub_queue)} messages in the {reporting.queue_name(sub_queue)}, "
                f"above {fail_above}" + (f" ({len(over)} entities over)" if len(over) > 1 else "")
            )


class Stream:
    """Off a terminal: one snapshot per interval, appended and flushed."""

    def __init__(self, fmt: str, q: Query | None, every: str) -> None:
        self.fmt, self.q, self.every = fmt, q, every

    def show(self, at: datetime, counts: Sequence[Counts]) -> None:
        from sbdlq.output.formats import FORMATS, Emitter

        if FORMATS[self.fmt].for_people:
            sys.stdout.write(report_tables.watch_header(self.every, at) + "\n")
            show_counts(counts, self.fmt, self.q)
            sys.stdout.flush()
            return
        emitter = Emitter(self.fmt, query=self.q)
        emitter.begin()
        for c in counts:
            emitter.item({"time": iso(at), **c.to_json()})
        emitter.end()

    def close(self) -> None:
        return None


class Redraw:
    """On a terminal: one table redrawn in place (output/report_tables.py `LiveList`)."""

    def __init__(self, every: str) -> None:
        self.every = every
        self.live = report_tables.LiveList()

    def show(self, at: datetime, counts: Sequence[Counts]) -> None:
        header = report_tables.watch_header(self.every, at, live=True)
        self.live.show(header, [c.to_json() for c in counts], COLUMNS)

    def close(self) -> None:
        self.live.close()


def watch_counts(
    ctx: typer.Context,
    sub_queue: SubQueue,
    entities: list[str],
    *,
    every: str,
    fail_above: int | None,
    output: str | None,
    q: Query | None,
) -> None:
    """Count again every interval until Ctrl-C (exit 130), or until over --fail-above (exit 3)."""
    import asyncio
    import signal

    from sbdlq.addresses import parse_entity
    from sbdlq.operations.browse import count_entities, dlq_count
    from sbdlq.operations.stopping import Stopper
    from sbdlq.operations.watch import every as repeat
    from sbdlq.output.formats import FORMATS, draws_table, or_list
    from sbdlq.timeparse import parse_duration

    last: list[Counts] = []
    with handled(ctx) as s:
        interval_s = parse_duration(every, what="--watch")
        if interval_s <= 0:
            raise BadInput("--watch must be positive", hint="e.g. --watch 5s")
        fmt = count_format(s, output, q)
        if fmt not in FORMATS or not FORMATS[fmt].streams:
            watched = or_list([name for name, f in FORMATS.items() if f.streams])
            raise BadInput(f"--watch cannot stream -o {fmt}", hint=f"use -o {watched}")
        paths: list[EntityPath] = [parse_entity(e) for e in entities]
        view: Stream | Redraw = Redraw(every) if draws_table(fmt, q) and _terminal() else Stream(fmt, q, every)

        def show(at: datetime, counts: list[Counts]) -> bool:
            last[:] = counts
            view.show(at, counts)
            return fail_above is not None and any(dlq_count(c, sub_queue) > fail_above for c in counts)

        # Nothing is in flight to finish: a signal cancels the watch at once.
        stopper = Stopper(lambda reason: None)

        async def watch() -> None:
            with stopper.installed():
                async with open_target(s) as backend:
                    await repeat(interval_s, lambda: count_entities(backend, paths or None), show)

        try:
            asyncio.run(watch())
        except (KeyboardInterrupt, asyncio.CancelledError):
            # Ctrl-C (or SIGTERM) is how a watch ends: no message, the conventional status.
            terminated = stopper.signum == signal.SIGTERM
            raise typer.Exit(int(ExitStatus.TERMINATED if terminated else ExitStatus.INTERRUPTED))
        finally:
            view.close()
    if fail_above is not None:
        check_threshold(ctx, last, sub_queue, fail_above)


def _terminal() -> bool:
    """Whether a person watches stdout (a redraw would garble a file or a pipe)."""
    return terminal.stdout_is_terminal()
