"""The lines of a `purge --export` or `peek -o jsonl` file, read back as Messages.

Both write one Message JSON object per line (DESIGN §4, `Message.to_json`). Reading is strict,
because replay sends what it reads: a line that is not such an object is a BadInput naming its
line number. What the JSON shape cannot carry back (the types of times and bytes in
application properties, which it writes as text) comes back as that text.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sbdlq.errors import BadInput, OperationFailed
from sbdlq.models import DEAD_LETTER_DESCRIPTION, DEAD_LETTER_REASON, MESSAGE_FIELDS, Message, fits_int64

#: The text fields a record gives as they are (the dead-letter marks go back into the properties).
_TEXT_FIELDS = tuple(f.name for f in MESSAGE_FIELDS if f.kind == "text" and not f.from_properties)
_EPOCH = datetime.fromtimestamp(0, UTC)


#: How every record line starts: `json.dumps(Message.to_json())` puts the sequence number first.
RECORD_PREFIX = b'{"sequence_number": '

#: The key `purge --export` adds last to each record: 0 when written (before the delete), set to 1
#: in place once the delete is confirmed. A record at 0 may still be in the DLQ (a kill between
#: export and delete, a lock lost): replay does not send it unless asked. Other files lack the key.
DELETED_KEY = "sbdlq_deleted"


@dataclass(frozen=True, slots=True)
class Record:
    """One line of the file: its number (from 1), the message it holds, and whether its purge confirmed
    the delete (None: a record without the mark, as `peek -o jsonl` and older exports write)."""

    line: int
    message: Message
    deleted: bool | None = None

    @property
    def identity(self) -> tuple[int, str | None, datetime]:
        """What tells one message from another in an export: a second export of it repeats all three."""
        m = self.message
        return (m.sequence_number, m.message_id, m.enqueued_time)


class DeleteMarks:
    """Which records of a file `replay` holds back, read off their delete marks (see DELETED_KEY).

    A record marked 0 whose message the file holds again further on (the same sequence number,
    message id and enqueued time: a rerun of the purge exported it again) is `repeated`: the later
    record is sent instead. One marked 0 that nothing repeats is `unconfirmed`: it may still be in
    the DLQ. Only records marked 0 are remembered: a kill leaves at most one batch of them.
    """

    def __init__(self) -> None:
        # identity → line (bodies are not kept: a batch of large messages would be held whole)
        self._pending: dict[tuple[int, str | None, datetime], int] = {}
        #: lines of records marked 0 whose message the file holds again further on
        self.repeated: set[int] = set()

    def see(self, record: Record) -> None:
        """Read the next record, in file order."""
        earlier = self._pending.pop(record.identity, None)
        if earlier is not None:
            self.repeated.add(earlier)
        if record.deleted is False:
            self._pending[record.identity] = record.line

    @property
    def any(self) -> bool:
        """Whether any record is held back."""
        return bool(self._pending or self.repeated)

    @property
    def unconfirmed(self) -> set[int]:
        """The lines of the records marked 0 that nothing further on repeats."""
        return set(self._pending.values())


#: the longest record line: a 100 MB body (Premium's largest message) base64-encoded, and its fields
LINE_MAX_BYTES = 100 * 2**20 * 4 // 3 + 2**20
#: how often (in lines) the second pass checks that the file is still the one checked
_STAT_EVERY = 64


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class RecordFile:
    """A JSONL file, or stdin spooled to a temporary file on the first pass, read line by line."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.name = "stdin" if path is None else str(path)
        self.spool: IO[bytes] | None = None
        self.digest = ""
        #: the file as the first pass left it (device, inode, size, mtime): the second checks it
        self.identity: tuple[int, ...] = ()
        #: the number of a last line cut short inside a record (a purge --export killed while writing
        #: it, before its sync, so before its delete: that message is still in the DLQ), or None
        self.torn: int | None = None

    def first_pass(self) -> Iterator[Record | None]:
        """Every line as a Record (None for a blank line), checking each; sets `digest` at the end."""
        sha = hashlib.sha256()
        if self.path is None:
            self.spool = tempfile.TemporaryFile(prefix="sbdlq-replay-")  # noqa: SIM115 (closed by close())
        with self._open() as f:
            for n, raw in enumerate(self._lines(f), start=1):
                sha.update(raw)
                if self.spool is not None:
                    self.spool.write(raw)
                yield self._record(n, raw)
            if self.spool is None:
                self.identity = _identity(os.fstat(f.fileno()))
        self.digest = sha.hexdigest()

    def second_pass(self) -> Iterator[Record | None]:
        """The same lines again (checked already). OperationFailed when the file changed since the
        first pass (rewritten by `jq ... > file` again, replaced): what was read would not be
        what was checked, and a replay that went on would end early and look finished."""
        if self.spool is not None:
            self.spool.seek(0)
            for n, raw in enumerate(self._lines(self.spool), start=1):
                yield self._record(n, raw)
            return
        sha = hashlib.sha256()
        with self._open() as f:
            for n, raw in enumerate(self._lines(f), start=1):
                if n % _STAT_EVERY == 1:
                    self._check_unchanged()
                sha.update(raw)
                yield self._record(n, raw)
        self._check_unchanged()
        if sha.hexdigest() != self.digest:
            raise self._changed()

    def _check_unchanged(self) -> None:
        assert self.path is not None
        try:
            now = _identity(os.stat(self.path))
        except OSError:
            raise self._changed() from None
        if now != self.identity:
            raise self._changed()

    def _changed(self) -> OperationFailed:
        return OperationFailed(
            f"{self.name} changed while it was replayed: stopped",
            hint="the records sent before are counted; check the file, then replay it again",
        )

    def _lines(self, f: IO[bytes]) -> Iterator[bytes]:
        """The file's lines, none longer than LINE_MAX_BYTES: a line is never held whole past the
        largest message a record can describe (a 300 MB line took 654 MB to refuse)."""
        n = 0
        while True:
            raw = f.readline(LINE_MAX_BYTES + 1)
            if not raw:
                return
            n += 1
            if len(raw) > LINE_MAX_BYTES:
                raise BadInput(
                    f"{self.name} line {n}: longer than {LINE_MAX_BYTES:,} bytes, more than a record of the "
                    "largest message Service Bus takes (100 MB)",
                    hint=_HINT,
                )
            yield raw

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()

    def _open(self) -> AbstractContextManager[IO[bytes]]:
        if self.path is None:
            return contextlib.nullcontext(sys.stdin.buffer)  # not closed: stdin is the process's
        try:
            return open(self.path, "rb")
        except OSError as exc:
            raise BadInput(f"cannot read {self.path}: {exc.strerror or exc}") from None

    def _record(self, n: int, raw: bytes) -> Record | None:
        if not raw.strip():
            return None
        if _torn(raw):
            self.torn = n
            return None
        try:
            doc = parse_line(raw)
            return Record(n, message_from_record(doc), _deleted(doc))
        except (ValueError, TypeError, RecursionError) as exc:
            raise BadInput(f"{self.name} line {n}: {_reason(exc)}", hint=_HINT) from None


def _torn(raw: bytes) -> bool:
    """Whether a line is the start of a record that a kill cut short: the last line (no newline),
    starting like a record, and not JSON. Anything else that is not a record is a bad line."""
    if raw.endswith(b"\n") or not (raw.startswith(RECORD_PREFIX) or RECORD_PREFIX.startswith(raw)):
        return False
    try:
        json.loads(raw)
    except ValueError:
        return True
    except RecursionError:
        return False  # whole, and nested past any record: a bad line
    return False


_HINT = "each line must be one message as `purge --export` or `peek -o jsonl` writes it"


#: the most digits a whole number in a record has: every one of them fits 64 bits (19 digits and a sign)
_INT_MAX_DIGITS = 20


def _parse_int(text: str) -> int:
    """A JSON whole number, refused past what any record field holds (before Python's own digit limit
    raises its error, or a 4,000-digit number is converted at all)."""
    if len(text.lstrip("-")) > _INT_MAX_DIGITS:
        raise ValueError(f"a number of {len(text.lstrip('-')):,} digits, past the 64 bits any record field holds")
    return int(text)


def parse_line(raw: bytes) -> Any:
    """One line's JSON: ValueError for what is not JSON or holds a number no record holds;
    RecursionError for nesting deeper than Python's stack (no record nests past two levels)."""
    return json.loads(raw, parse_int=_parse_int)


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply to be a record (objects and arrays inside each other)"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg} at column {exc.colno})"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return str(exc)


#: the longest message id and session id Service Bus takes
_MAX_ID_CHARS = 128
#: the longest TTL a record may give: .NET's TimeSpan.MaxValue, in whole days (Service Bus's ceiling)
_TTL_MAX_S = 10_675_199 * 86_400


def message_from_record(doc: Any) -> Message:
    """The Message a record describes; ValueError saying which field is wrong."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    seq = doc.get("sequence_number")
    if type(seq) is not int or not 0 <= seq < 2**63:
        raise ValueError("sequence_number: expected a whole number (64 bits, not negative)")
    props = doc.get("application_properties") or {}
    if not isinstance(props, dict):
        raise ValueError("application_properties: expected an object")
    props = dict(props)
    for key, name in (
        ("dead_letter_reason", DEAD_LETTER_REASON),
        ("dead_letter_error_description", DEAD_LETTER_DESCRIPTION),
    ):
        if doc.get(key) is not None and name not in props:
            props[name] = _text(doc, key)
    ttl = doc.get("time_to_live_s")
    if ttl is not None and (type(ttl) not in (int, float) or not 0 < ttl <= _TTL_MAX_S):
        raise ValueError("time_to_live_s: expected a positive number of seconds (at most 10675199 days)")
    for key, value in props.items():
        _utf8("application_properties", key)
        if isinstance(value, (list, dict)):
            # An export writes every property as a plain value: a list or object is not one it wrote.
            raise ValueError(f"application_properties.{key}: expected a string, number, boolean or null")
        if isinstance(value, str):
            _utf8(f"application_properties.{key}", value)
        elif type(value) is int and not fits_int64(value):
            raise ValueError(f"application_properties.{key}: {value} is past the 64-bit range a property holds")
    deliveries = doc.get("delivery_count", 0)
    if type(deliveries) is not int or not 0 <= deliveries < 2**32:
        raise ValueError("delivery_count: expected a whole number (32 bits, not negative)")
    texts: dict[str, Any] = {name: _text(doc, name) for name in _TEXT_FIELDS}
    for name in ("message_id", "session_id"):
        if texts.get(name) is not None and len(texts[name]) > _MAX_ID_CHARS:
            raise ValueError(f"{name}: {len(texts[name])} characters, past the 128 Service Bus takes")
    return Message(
        sequence_number=seq,
        body=_body(doc),
        enqueued_time=_time(doc, "enqueued_time") or _EPOCH,
        expires_at=_time(doc, "expires_at"),
        delivery_count=deliveries,
        time_to_live_s=None if ttl is None else float(ttl),
        application_properties=props,
        **texts,
    )


def _deleted(doc: dict[str, Any]) -> bool | None:
    """The record's delete mark (see DELETED_KEY); ValueError for a value no export writes."""
    mark = doc.get(DELETED_KEY)
    if mark is None:
        return None
    if type(mark) is not int or mark not in (0, 1):
        raise ValueError(f"{DELETED_KEY}: expected 0 or 1")
    return mark == 1


def _text(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name}: expected a string or null")
    return value if value is None else _utf8(name, value)


def _utf8(name: str, text: str) -> str:
    """text, where it can be sent: JSON's \\ud800 escapes give a lone surrogate, which no UTF-8 holds."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name}: holds a lone surrogate (\\ud800-\\udfff), which is not text") from None
    return text


def _body(doc: dict[str, Any]) -> bytes:
    body = doc.get("body")
    if not isinstance(body, str):
        raise ValueError("body: expected a string")
    encoding = doc.get("body_encoding", "utf-8")
    if encoding == "utf-8":
        return body.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except binascii.Error:
            raise ValueError("body: not valid base64") from None
    raise ValueError(f"body_encoding {encoding!r}: expected utf-8 or base64")


def _time(doc: dict[str, Any], name: str) -> datetime | None:
    text = _text(doc, name)
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{name}: expected an ISO 8601 time") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value
