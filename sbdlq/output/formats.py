"""The `-o` formats: one registry, one entry per format (httpie's formatter plugins are the model).

Each format says how it writes a whole document (a result, a list) and how it streams records
one by one (peek, `count --watch`), and answers the questions the commands used to ask by
name: is it the table a person reads (the command then draws its own), does `--query` apply to
each record, can a watch stream it, does it hold only the table's columns, is its document
metric families, which commands offer it (every one, or those it names: prometheus is count's
and apply's) and which refuse it with a reason of their own. Adding a format is one
`OutputFormat` subclass registered here; every `-o` option's help, its completion, the profile
key `output` and the errors for a name a command does not offer all read `FORMATS`.
"""

from __future__ import annotations

import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import IO, Any, ClassVar

from sbdlq.errors import BadInput
from sbdlq.output.render import Query, auto_table, dump_yaml, json_document_text, json_text, tsv_line, write_tsv

#: the format when neither -o nor the profile names one
DEFAULT_OUTPUT = "table"


class OutputFormat(ABC):
    """One `-o` value. Streaming calls begin, item (per record), end; a document is written whole."""

    name: ClassVar[str]
    #: the name as --help lists it, with a word on what it is when the name alone does not say
    shown: ClassVar[str]
    #: the table a person reads: commands draw their own (titles, notes, charts) unless --query
    for_people: ClassVar[bool] = False
    #: --query applies to each record, not to the whole list
    per_record: ClassVar[bool] = False
    #: `count --watch` can append one snapshot after another
    streams: ClassVar[bool] = False
    #: a record holds only the table's columns (the caller's keys), with full values
    table_columns: ClassVar[bool] = False
    #: its document is metric families (`output/prometheus.py` `Family`), not records
    metrics: ClassVar[bool] = False
    #: --query may shape what it writes; a command refuses --query with it otherwise
    takes_query: ClassVar[bool] = True
    #: None: every command offers it (and a profile's `output` may name it); else only the
    #: commands it names, each with the words that command's `-o` help gives it
    offered_by: ClassVar[Mapping[str, str] | None] = None
    #: commands that refuse it with a reason of their own, not as a name they do not know: (why, hint)
    refused_by: ClassVar[Mapping[str, tuple[str, str]]] = {}

    @abstractmethod
    def document(self, data: Any, out: IO[str]) -> None:
        """One whole document (every format writes its own)."""

    def begin(self, out: IO[str]) -> None:
        """Before the first streamed record."""
        return None  # most formats need no opening

    def item(self, record: Any, out: IO[str], index: int) -> None:
        """One streamed record (index: how many came before it)."""
        self.document([record], out)

    def end(self, out: IO[str], count: int) -> None:
        """After the last streamed record (count: how many)."""
        return None  # most formats need no closing


class Table(OutputFormat):
    name = shown = "table"
    for_people = streams = True

    def document(self, data: Any, out: IO[str]) -> None:
        auto_table(data, out=out)

    def item(self, record: Any, out: IO[str], index: int) -> None:
        return None  # the commands draw the person's table themselves


class Json(OutputFormat):
    name = shown = "json"

    def document(self, data: Any, out: IO[str]) -> None:
        out.write(json_document_text(data) + "\n")

    def begin(self, out: IO[str]) -> None:
        out.write("[")

    def item(self, record: Any, out: IO[str], index: int) -> None:
        out.write(("\n  " if index == 0 else ",\n  ") + json_text(record))

    def end(self, out: IO[str], count: int) -> None:
        out.write("\n]\n" if count else "]\n")


class Jsonl(OutputFormat):
    name = shown = "jsonl"
    per_record = streams = True

    def document(self, data: Any, out: IO[str]) -> None:
        for record in data if isinstance(data, list) else [data]:
            self.item(record, out, 0)

    def item(self, record: Any, out: IO[str], index: int) -> None:
        out.write(json_text(record) + "\n")


class Yaml(OutputFormat):
    name = shown = "yaml"

    def document(self, data: Any, out: IO[str]) -> None:
        out.write(dump_yaml(data))

    def end(self, out: IO[str], count: int) -> None:
        if count == 0:
            out.write("[]\n")


class Tsv(OutputFormat):
    name = "tsv"
    shown = "tsv (no header, tab-separated)"
    streams = table_columns = True

    def document(self, data: Any, out: IO[str]) -> None:
        write_tsv(data, out)

    def item(self, record: Any, out: IO[str], index: int) -> None:
        out.write(tsv_line(list(record.values()) if isinstance(record, dict) else [record]))


class Nothing(OutputFormat):
    name = "none"
    shown = "none (exit status only)"
    streams = True

    def document(self, data: Any, out: IO[str]) -> None:
        return None

    def item(self, record: Any, out: IO[str], index: int) -> None:
        return None


class Prometheus(OutputFormat):
    """Gauges in the Prometheus text format, for node_exporter's textfile collector (`output/prometheus.py`)."""

    name = shown = "prometheus"
    metrics = True
    takes_query = False
    offered_by: ClassVar[Mapping[str, str] | None] = {
        "count": "gauges for node_exporter's textfile collector",
        "apply": "for node_exporter's textfile collector",
    }
    refused_by: ClassVar[Mapping[str, tuple[str, str]]] = {
        "inspect-reason": (
            "its groups (fingerprints, descriptions) are unbounded, and a label per group would make an "
            "unbounded label set",
            "use -o json, or count -o prometheus for gauges per entity",
        ),
    }

    def document(self, data: Any, out: IO[str]) -> None:
        from sbdlq.output.prometheus import exposition

        out.write(exposition(data))


FORMATS: dict[str, OutputFormat] = {
    f.name: f for f in (Table(), Json(), Jsonl(), Yaml(), Tsv(), Nothing(), Prometheus())
}


def outputs(command: str | None = None, *, nested: bool = False) -> tuple[str, ...]:
    """The formats a command offers, in registry order: every command's (but those holding only a
    table's columns, where its records are nested) and those offered to it by name. No command:
    the formats every command offers, which a profile's `output` may name."""
    return tuple(
        name
        for name, f in FORMATS.items()
        if (f.offered_by is None and not (nested and f.table_columns))
        or (command is not None and f.offered_by is not None and command in f.offered_by)
    )


#: the formats every command offers (a profile's `output` is one of them)
OUTPUTS = outputs()


def or_list(items: Sequence[str]) -> str:
    return ", ".join(items[:-1]) + " or " + items[-1]


def output_help() -> str:
    """The `-o` option's help, from the registry: the formats every command offers."""
    return f"{or_list([FORMATS[name].shown for name in outputs()])}; default: {DEFAULT_OUTPUT}."


def offer_help(command: str, *, nested: bool = False) -> str:
    """The `-o` help of a command offered formats by name: each it writes, those with the command's words."""
    shown = [
        name if (by := FORMATS[name].offered_by) is None else f"{name} ({by[command]})"
        for name in outputs(command, nested=nested)
    ]
    return ", ".join(shown[:-1]) + " or " + shown[-1] + "."


def check_output(fmt: str) -> str:
    """fmt when every command offers it; BadInput listing those otherwise."""
    found = FORMATS.get(fmt)
    if found is None or found.offered_by is not None:
        raise BadInput(f"invalid output format {fmt!r}", hint=f"use {or_list(list(outputs()))}")
    return fmt


def offered_by_name(command: str, given: str | None) -> OutputFormat | None:
    """The format `given` names when it is one the command is offered by name (count's prometheus), else None."""
    found = FORMATS.get(given or "")
    if found is None or found.offered_by is None or command not in found.offered_by:
        return None
    return found


def refuse(command: str, given: str | None) -> None:
    """BadInput in the command's own words when it refuses the format `given` names (any case, spaces around)."""
    found = FORMATS.get((given or "").strip().lower())
    if found is not None and command in found.refused_by:
        why, hint = found.refused_by[command]
        raise BadInput(f"{command} offers no -o {found.name}: {why}", hint=hint)


def draws_table(fmt: str, query: Query | None) -> bool:
    """Whether the command draws its own table for a person: a table format and no --query."""
    return FORMATS[fmt].for_people and query is None


def write_document(
    data: Any,
    fmt: str,
    out: IO[str] | None = None,
    *,
    query: Query | None = None,
    columns: Sequence[str] | None = None,
) -> None:
    """One document (a result or a list) in the format, after the query; a list of records in a
    table-columns format (tsv) holds only `columns`, as `Emitter.item` does for a stream."""
    stream = out or sys.stdout
    if query is not None:
        data = query.apply(data)
    elif columns is not None and FORMATS[fmt].table_columns:
        data = [{k: record.get(k) for k in columns} for record in data]
    FORMATS[fmt].document(data, stream)
    stream.flush()


class Emitter:
    """Writes a stream of records in one format (json: one array document, streamed)."""

    def __init__(
        self,
        fmt: str,
        out: IO[str] | None = None,
        query: Query | None = None,
        *,
        columns: Sequence[str] | None = None,
    ) -> None:
        self.fmt = check_output(fmt)
        self.format = FORMATS[fmt]
        self.out = out or sys.stdout
        self.count = 0
        self.query = query
        #: the record keys a table-columns format (tsv) holds; None: every key
        self.columns = columns
        self._flushed = time.monotonic()
        # A query over the whole list needs the whole list; a per-record format applies it to each.
        whole = query is not None and not self.format.per_record
        self._held: list[dict[str, Any]] | None = [] if whole else None

    def begin(self) -> None:
        if self._held is None:
            self.format.begin(self.out)

    def item(self, record: dict[str, Any]) -> None:
        if self._held is not None:
            self._held.append(record)
            self.count += 1
            return
        shown: Any = record
        if self.query is not None:
            shown = self.query.apply(record)
        elif self.format.table_columns and self.columns is not None:
            shown = {k: record.get(k) for k in self.columns}
        self.format.item(shown, self.out, self.count)
        self.count += 1
        now = time.monotonic()
        if now - self._flushed > 0.2:
            # Streamed: a reader sees records as they come, without a flush per record.
            self.out.flush()
            self._flushed = now

    def end(self) -> None:
        if self._held is not None:
            write_document(self._held, self.fmt, self.out, query=self.query)
            return
        self.format.end(self.out, self.count)
        self.out.flush()
