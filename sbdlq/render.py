"""Output: table / json / jsonl / yaml on stdout, progress bars and notes on stderr.

stdout carries only the requested output so pipes stay clean; progress appears only
when stderr is a terminal.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from sbdlq.errors import BadInput

OUTPUTS = ("table", "json", "jsonl", "yaml")
# One encoder for every record: json.dumps builds a new one per call when given options.
_encode = json.JSONEncoder(ensure_ascii=False).encode


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

    def __init__(self, fmt: str, out: IO[str] | None = None, query: Query | None = None) -> None:
        self.fmt = check_output(fmt)
        self.out = out or sys.stdout
        self.count = 0
        self.query = query
        self._flushed = time.monotonic()
        # A query over the whole list needs the whole list; jsonl applies it line by line.
        self._held: list[dict[str, Any]] | None = [] if query is not None and fmt != "jsonl" else None

    def begin(self) -> None:
        if self.fmt == "json" and self._held is None:
            self.out.write("[")

    def item(self, record: dict[str, Any]) -> None:
        if self._held is not None:
            self._held.append(record)
            self.count += 1
            return
        if self.query is not None:
            self.out.write(_encode(self.query.apply(record)) + "\n")
            self.count += 1
            return
        if self.fmt == "json":
            self.out.write(("\n  " if self.count == 0 else ",\n  ") + _encode(record))
        elif self.fmt == "jsonl":
            self.out.write(_encode(record) + "\n")
            now = time.monotonic()
            if now - self._flushed > 0.2:
                # Streamed: a reader sees lines as they come, without a flush per line.
                self.out.flush()
                self._flushed = now
        elif self.fmt == "yaml":
            self.out.write(dump_yaml([record]))
        self.count += 1

    def end(self) -> None:
        if self._held is not None:
            write_document(self._held, self.fmt, self.out, query=self.query)
            return
        if self.fmt == "json":
            self.out.write("\n]\n" if self.count else "]\n")
        elif self.fmt == "yaml" and self.count == 0:
            self.out.write("[]\n")
        self.out.flush()


def dump_yaml(data: Any) -> str:
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False))


class Query:
    """A JMESPath expression (`--query`, as in the az CLI), compiled once."""

    def __init__(self, expression: str) -> None:
        import jmespath
        from jmespath.exceptions import JMESPathError

        self.expression = expression
        # Results so far, and how many were null: `--query` that never matches is warned about.
        self.applied = 0
        self.nulls = 0
        try:
            self._compiled = jmespath.compile(expression)
        except JMESPathError as exc:
            detail = (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(": ")
            raise BadInput(f"invalid --query {expression!r}: {detail}")

    def apply(self, data: Any) -> Any:
        result = self._compiled.search(data)
        self.applied += 1
        self.nulls += result is None
        return result

    def found_nothing(self) -> bool:
        """Whether every result so far was null (a path that matches no field, usually)."""
        return self.applied > 0 and self.nulls == self.applied


def compile_query(expression: str | None) -> Query | None:
    """The --query option, or None."""
    return None if expression is None else Query(expression)


def write_document(data: Any, fmt: str, out: IO[str] | None = None, *, query: Query | None = None) -> None:
    """One document (a result or a list) in json / jsonl / yaml / table, after the query."""
    stream = out or sys.stdout
    if query is not None:
        data = query.apply(data)
    if fmt == "table":
        auto_table(data, out=stream)
    elif fmt == "json":
        stream.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    elif fmt == "jsonl":
        for record in data if isinstance(data, list) else [data]:
            stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    elif fmt == "yaml":
        stream.write(dump_yaml(data))
    stream.flush()


@dataclass(frozen=True)
class Col:
    """A table column: how it may shrink, and whether it may be dropped on a narrow terminal."""

    name: str
    numeric: bool = False
    #: never narrower than this (None: the header's length)
    min_width: int | None = None
    #: never wider than this
    max_width: int | None = None
    #: columns with a higher number are dropped first when the terminal is too narrow; 0: never
    drop: int = 0


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A Rich table with the default box and padding: one rule per column plus one, and two
# spaces of padding per column.
_PER_COLUMN = 3


def cell_text(value: Any) -> str:
    """A cell's text: one line, no control characters (message content may carry escapes)."""
    if value is None:
        return ""
    text = str(value).replace("\r\n", " ").replace("\n", " ").replace("\t", " ")
    return _CONTROL.sub("\N{REPLACEMENT CHARACTER}", text)


def clip(text: str, width: int) -> str:
    """The text cut to width, with an ellipsis when cut."""
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


def layout(columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> list[tuple[int, int]]:
    """(column index, width) of the columns that fit in `width`, most important kept."""
    keep = list(range(len(columns)))
    natural = []
    for i, c in enumerate(columns):
        n = max([len(c.name), *(len(r[i]) for r in rows)])
        natural.append(min(n, c.max_width) if c.max_width is not None else n)

    def floor(i: int) -> int:
        # Short content needs no more than itself: more columns then fit.
        c = columns[i]
        return min(c.min_width if c.min_width is not None else len(c.name), natural[i])

    while True:
        need = sum(floor(i) for i in keep) + _PER_COLUMN * len(keep) + 1
        droppable = [i for i in keep if columns[i].drop]
        if need <= width or not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    widths = {i: max(natural[i], floor(i)) for i in keep}
    excess = sum(widths.values()) + _PER_COLUMN * len(keep) + 1 - width
    while excess > 0:
        # Take a character from the widest column that can still give one.
        shrinkable = [i for i in keep if widths[i] > floor(i) and not columns[i].numeric]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda j: (widths[j] - floor(j), j))
        widths[i] -= 1
        excess -= 1
    return [(i, widths[i]) for i in keep]


def table(
    columns: Sequence[str | Col],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    width: int | None = None,
) -> None:
    """A Rich table on stdout, one line per row: columns shrink (ellipsis) or drop to fit the terminal."""
    from rich.table import Table
    from rich.text import Text

    cols = [c if isinstance(c, Col) else Col(c, numeric=c in _NUMERIC) for c in columns]
    texts = [[cell_text(v) for v in r] for r in rows]
    con = stdout_console()
    fitted = layout(cols, texts, width or con.width)
    t = Table(title=Text(title) if title else None, show_lines=False, header_style="bold", expand=False)
    for i, w in fitted:
        t.add_column(
            Text(clip(cols[i].name, w)),
            justify="right" if cols[i].numeric else "left",
            width=w,
            no_wrap=True,
            overflow="ellipsis",
        )
    for r in texts:
        # Text, not str: message content must never be read as Rich markup.
        t.add_row(*[Text(clip(r[i], w)) for i, w in fitted])
    con.print(t)


_NUMERIC = frozenset({"active", "dead_letter", "transfer_dead_letter", "scheduled", "count", "seq", "deliveries"})


def bar_chart(items: Sequence[tuple[str, int]], *, width: int = 40, title: str | None = None) -> None:
    """Horizontal bars, for a person at a terminal; a zero shows as no bar at all."""
    from rich.text import Text

    if not items:
        return
    top = max(n for _, n in items) or 1
    label_w = min(max(len(cell_text(k)) for k, _ in items), 48)
    con = stdout_console()
    if title:
        con.print(Text(title, style="bold"))
    for key, n in items:
        bar = "█" * max(1, round(width * n / top)) if n else ""
        line = Text(f"{clip(cell_text(key), label_w):<{label_w}}  ")
        line.append(bar, style="cyan")
        line.append(f" {n}")
        con.print(line)


@contextmanager
def progress(description: str, *, enabled: bool = True) -> Iterator[Callable[[int | None], Callable[[int], None]]]:
    """A factory for Rich progress bars on stderr; no-ops when stderr is not a terminal."""
    if not enabled or not stderr_is_terminal():
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
        # stdout carries the output: Rich must not route it through the stderr console.
        redirect_stdout=False,
    )

    def start(total: int | None) -> Callable[[int], None]:
        task = bar.add_task(description if total is not None else description + " (scanning)", total=total)
        return lambda n: bar.advance(task, n)

    with bar:
        yield start


def auto_table(data: Any, *, out: IO[str] | None = None) -> None:
    """A queried result as a person reads it: rows of objects, a list, or one value."""
    stream = out or sys.stdout
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        columns: list[str] = []
        for r in data:
            columns += [k for k in r if k not in columns]
        rows = [[_cell(r.get(c)) for c in columns] for r in data]
    elif isinstance(data, list):
        columns, rows = ["value"], [[_cell(v)] for v in data]
    elif isinstance(data, dict):
        columns, rows = ["key", "value"], [[k, _cell(v)] for k, v in data.items()]
    else:
        stream.write(("" if data is None else _cell(data)) + "\n")
        return
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    stream.write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for r in rows:
        stream.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return _encode(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
