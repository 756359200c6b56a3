"""Output: table / json / jsonl / yaml on stdout, progress bars and notes on stderr.

stdout carries only the requested output so pipes stay clean; progress appears only
when stderr is a terminal.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from sbdlq.errors import BadInput

OUTPUTS = ("table", "json", "jsonl", "yaml")


def check_output(fmt: str) -> str:
    if fmt not in OUTPUTS:
        raise BadInput(f"invalid output format {fmt!r}", hint="use table, json, jsonl or yaml")
    return fmt


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def stdout_console() -> Any:
    """A Rich console on stdout (colour only on a terminal, never with NO_COLOR)."""
    return _console()


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def note(text: str) -> None:
    """One plain line on stderr."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class Emitter:
    """Writes a stream of records in one format; json becomes one array document, streamed."""

    def __init__(self, fmt: str, out: IO[str] | None = None, query: Any = None) -> None:
        self.fmt = check_output(fmt)
        self.out = out or sys.stdout
        self.count = 0
        self.query = query

    def begin(self) -> None:
        if self.fmt == "json":
            self.out.write("[")

    def item(self, record: dict[str, Any]) -> None:
        if self.fmt == "json":
            self.out.write(("\n  " if self.count == 0 else ",\n  ") + json.dumps(record, ensure_ascii=False))
        elif self.fmt == "jsonl":
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.out.flush()
        elif self.fmt == "yaml":
            self.out.write(dump_yaml([record]))
        self.count += 1

    def end(self) -> None:
        if self.fmt == "json":
            self.out.write("\n]\n" if self.count else "]\n")
        elif self.fmt == "yaml" and self.count == 0:
            self.out.write("[]\n")
        self.out.flush()


def dump_yaml(data: Any) -> str:
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False))


def write_document(data: Any, fmt: str, out: IO[str] | None = None) -> None:
    """One document (a result or a list) in json / jsonl / yaml."""
    stream = out or sys.stdout
    if fmt == "json":
        stream.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    elif fmt == "jsonl":
        for record in data if isinstance(data, list) else [data]:
            stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    elif fmt == "yaml":
        stream.write(dump_yaml(data))
    stream.flush()


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
    """A Rich table on stdout."""
    from rich.table import Table

    t = Table(title=title, show_lines=False, header_style="bold", expand=False)
    for c in columns:
        numeric = c in ("active", "dead_letter", "transfer_dead_letter", "scheduled", "count", "seq", "deliveries")
        t.add_column(c, justify="right" if numeric else "left", overflow="fold" if c in ("key",) else "ellipsis")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    stdout_console().print(t)


def bar_chart(items: Sequence[tuple[str, int]], *, width: int = 40) -> None:
    """Horizontal bars, for a person at a terminal."""
    if not items:
        return
    top = max(n for _, n in items) or 1
    label_w = min(max(len(k) for k, _ in items), 48)
    con = stdout_console()
    for key, n in items:
        bar = "█" * max(1, round(width * n / top))
        label = key if len(key) <= label_w else key[: label_w - 1] + "…"
        con.print(f"{label:<{label_w}}  [cyan]{bar}[/cyan] {n}")


@contextmanager
def progress(description: str) -> Iterator[Callable[[int | None], Callable[[int], None]]]:
    """A factory for Rich progress bars on stderr; no-ops when stderr is not a terminal."""
    if not stderr_is_terminal():
        yield lambda total: lambda n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=_console(stderr=True),
        transient=True,
    )

    def start(total: int | None) -> Callable[[int], None]:
        task = bar.add_task(description if total is not None else description + " (scanning)", total=total)
        return lambda n: bar.advance(task, n)

    with bar:
        yield start
