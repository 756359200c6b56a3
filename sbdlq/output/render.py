"""The drawing the formats share: tables and bar charts on stdout, progress bars on stderr.

The formats `-o` takes are the `FORMATS` registry of output/formats.py, which calls on this
module: tables, the JSON encoder (NaN and Infinity as strings), YAML, TSV cells, and the
compiled `--query` expression. Notes on stderr are cli/notes.py's.

stdout carries only the requested output so pipes stay clean; progress appears only
when stderr is a terminal. Tables never cut an identifier: on a terminal they fold it,
off one they are as wide as their content.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from sbdlq import terminal
from sbdlq.errors import BadInput
from sbdlq.models import COUNT_NAMES


def _finite(value: Any) -> Any:
    """The value with NaN and infinities as the strings "NaN", "Infinity", "-Infinity" (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json_encoder(**options: Any) -> Any:
    """An encoder that never writes a bare NaN or Infinity: a property may hold one, and no JSON
    reader takes it. The plain encoding is tried first (the check is one substring search)."""
    encode = json.JSONEncoder(ensure_ascii=False, **options).encode

    def encode_finite(value: Any) -> str:
        text = encode(value)
        return encode(_finite(value)) if "NaN" in text or "Infinity" in text else text

    return encode_finite


# One encoder for every record: json.dumps builds a new one per call when given options.
json_text = _json_encoder()
json_document_text = _json_encoder(indent=2)


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def stdout_console() -> Any:
    """A Rich console on stdout (colour only on a terminal, never with NO_COLOR)."""
    return _console()


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


def tsv_cell(value: Any) -> str:
    """One tsv field: the full value, with backslash, tab, newline and carriage return escaped."""
    if value is None:
        return ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        text = ",".join(tsv_cell(v) for v in value)
    elif isinstance(value, (dict, list)):
        text = json_text(value)
    else:
        text = str(value)
    return text.translate(_TSV_ESCAPES)


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_line(values: Sequence[Any]) -> str:
    """One row as a tab-separated line."""
    return "\t".join(tsv_cell(v) for v in values) + "\n"


def write_tsv(data: Any, out: IO[str]) -> None:
    """A document as az writes tsv: no header, one line per row (an object's values or a list's
    items), nothing for null."""
    for row in data if isinstance(data, list) else [data]:
        if row is None:
            continue
        if isinstance(row, dict):
            row = list(row.values())
        out.write(tsv_line(row if isinstance(row, list) else [row]))


@dataclass(frozen=True)
class Col:
    """A table column: whether its values must stay whole, how far it may shrink, and when it goes.

    `whole` columns (entity paths, reasons, message ids, sequence numbers, times) are never
    cut: on a narrow terminal they fold onto more lines. The others hold free text (bodies,
    descriptions) and are shortened with a visible ellipsis.
    """

    name: str
    numeric: bool = False
    #: never cut: fold onto more lines instead (numbers are always whole)
    whole: bool = False
    #: never narrower than this (None: the header's length)
    min_width: int | None = None
    #: free text only: never wider than this, on a terminal or off one
    max_width: int | None = None
    #: columns with a higher number are dropped first when the terminal is too narrow; 0: never
    drop: int = 0

    @property
    def kept_whole(self) -> bool:
        return self.whole or self.numeric


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


def human_size(n: int) -> str:
    """A byte count for people: `512 bytes`, `12.0 KB`, `12.0 MB` (1 KB = 1024 bytes)."""
    if n < 1024:
        return f"{n} bytes"
    size = float(n)
    for unit in ("KB", "MB", "GB"):
        size /= 1024
        if size < 1024 or unit == "GB":
            break
    return f"{size:.1f} {unit}"


def table_width(widths: Sequence[int]) -> int:
    """The printed width of a table with these column widths (rules and padding included)."""
    return sum(widths) + _PER_COLUMN * len(widths) + 1


def layout(columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int | None) -> list[tuple[int, int]]:
    """(column index, width) of the columns to show: all at their content's width when `width`
    is None (off a terminal), else fitted to `width`: drop, shorten free text, then fold the rest."""
    natural = []
    for i, c in enumerate(columns):
        n = max([len(c.name), *(len(r[i]) for r in rows)])
        natural.append(min(n, c.max_width) if c.max_width is not None and not c.kept_whole else n)
    keep = list(range(len(columns)))
    if width is None:
        return [(i, natural[i]) for i in keep]

    def floor(i: int) -> int:
        # Short content needs no more than itself; a header is never cut; numbers never shrink.
        c = columns[i]
        if c.numeric:
            return natural[i]
        return min(max(c.min_width or 0, len(c.name)), natural[i])

    def needed(i: int) -> int:
        # Optional columns go before an identifier has to fold.
        return natural[i] if columns[i].kept_whole else floor(i)

    while table_width([needed(i) for i in keep]) > width:
        droppable = [i for i in keep if columns[i].drop]
        if not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    widths = {i: natural[i] for i in keep}
    excess = table_width(list(widths.values())) - width
    # Free text gives way first; identifiers fold only when that is not enough.
    for whole in (False, True):
        while excess > 0:
            shrinkable = [i for i in keep if widths[i] > floor(i) and columns[i].kept_whole is whole]
            if not shrinkable:
                break
            # Take a character from the column with the most to give.
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
    """A Rich table on stdout: fitted to a terminal (free text shortened, identifiers folded),
    as wide as its content off one, so a pipe to grep sees every identifier whole."""
    con = stdout_console()
    con.print(table_renderable(columns, rows, title=title, width=width, console=con))


def table_renderable(
    columns: Sequence[str | Col],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    width: int | None = None,
    console: Any = None,
) -> Any:
    """The Rich table `table` prints, for a caller that draws it itself (`count --watch`'s Live)."""
    cols = _cols(columns)
    texts = [[cell_text(v) for v in r] for r in rows]
    con = console or stdout_console()
    fitted = _fit(cols, texts, width, con)
    return _rich_table(cols, texts, fitted, title=title)


def _cols(columns: Sequence[str | Col]) -> list[Col]:
    # A column named by a bare string holds identifiers or numbers: kept whole.
    return [c if isinstance(c, Col) else Col(c, numeric=c in NUMERIC_COLUMNS, whole=True) for c in columns]


def _fit(cols: Sequence[Col], texts: Sequence[Sequence[str]], width: int | None, con: Any) -> list[tuple[int, int]]:
    fitted = layout(cols, texts, width or (con.width if terminal.renders_as_terminal(con) else None))
    if width is None and not terminal.renders_as_terminal(con):
        # Off a terminal Rich would squeeze the table into 80 columns: give it its own width.
        con.width = table_width([w for _, w in fitted])
    return fitted


def _rich_table(
    cols: Sequence[Col],
    texts: Sequence[Sequence[str]],
    fitted: Sequence[tuple[int, int]],
    *,
    title: str | None = None,
    caption: str | None = None,
    show_header: bool = True,
) -> Any:
    from rich.table import Table
    from rich.text import Text

    t = Table(
        title=Text(title) if title else None,
        caption=Text(caption) if caption else None,
        show_header=show_header,
        show_lines=False,
        header_style="bold",
        expand=False,
    )
    for i, w in fitted:
        whole = cols[i].kept_whole
        t.add_column(
            Text(cols[i].name),
            justify="right" if cols[i].numeric else "left",
            width=w,
            no_wrap=not whole,
            overflow="fold" if whole else "ellipsis",
        )
    for r in texts:
        # Text, not str: message content must never be read as Rich markup.
        t.add_row(*[Text(r[i] if cols[i].kept_whole else clip(r[i], w)) for i, w in fitted])
    return t


class PagedTable:
    """A table of any number of rows in the memory of one page: rows are printed a page at a
    time, every page at the widths the first page was fitted to.

    Up to one page, the table is exactly what `table` prints, its title given the row count.
    Past it, the first page's title says it comes in pages, and the last page's caption is the
    title with the count. `title(n)` makes the title: n rows, or None while the count is not known.
    """

    def __init__(self, columns: Sequence[str | Col], title: Callable[[int | None], str], page_rows: int) -> None:
        self.cols = _cols(columns)
        self.title = title
        self.page_rows = max(1, page_rows)
        self.rows: list[list[str]] = []
        self.printed = 0
        self.fitted: list[tuple[int, int]] | None = None

    def add(self, row: Sequence[Any]) -> None:
        """A row; a full page is printed when the row after it comes (so the last page knows it is last)."""
        if len(self.rows) == self.page_rows:
            self._print_page(last=False)
        self.rows.append([cell_text(v) for v in row])

    def close(self) -> None:
        """Print what is left: the whole table if it fit in one page, else the last page."""
        if self.fitted is None:
            table(self.cols, self.rows, title=self.title(len(self.rows)))
        elif self.rows:
            self._print_page(last=True)
        self.rows = []

    def _print_page(self, *, last: bool) -> None:
        con = stdout_console()
        first = self.fitted is None
        if self.fitted is None:
            self.fitted = _fit(self.cols, self.rows, None, con)
        else:
            # The first page's widths, but a number is never cut: a longer one widens its column.
            self.fitted = [
                (i, max(w, *(len(r[i]) for r in self.rows)) if self.cols[i].numeric else w) for i, w in self.fitted
            ]
            if not terminal.renders_as_terminal(con):
                con.width = table_width([w for _, w in self.fitted])
        self.printed += len(self.rows)
        title = f"{self.title(None)} (in pages of {self.page_rows})" if first else None
        caption = self.title(self.printed) if last else None
        con.print(_rich_table(self.cols, self.rows, self.fitted, title=title, caption=caption, show_header=first))
        self.rows = []


#: The columns right-aligned as numbers when a table names them by key: every count, and these.
NUMERIC_COLUMNS = frozenset({*COUNT_NAMES, "count", "seq", "deliveries"})


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
    if not enabled or not terminal.stderr_can_animate():
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
        rows = [[cell_value(r.get(c)) for c in columns] for r in data]
    elif isinstance(data, list):
        columns, rows = ["value"], [[cell_value(v)] for v in data]
    elif isinstance(data, dict):
        columns, rows = ["key", "value"], [[k, cell_value(v)] for k, v in data.items()]
    else:
        stream.write(("" if data is None else cell_value(data)) + "\n")
        return
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    stream.write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for r in rows:
        stream.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")


def cell_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
