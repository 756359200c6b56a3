"""The AMQP sections a message keeps as sent, beyond what the store's columns hold.

The store keeps a message in columns (text ids, JSON application properties) that SQL
filters and the CLI read. What those columns would lose is kept here, encoded, in the
message's `amqp` blob: application properties of types JSON lacks (int32, ulong, float,
char, symbol ...), the header's durable / priority / first-acquirer, custom message
annotations, the properties a column doesn't hold (user-id, creation-time, group-sequence,
typed message and correlation ids), the footer, and a body of several data sections.

A blob is itself a run of whole sections, in the spec's order; only sections that carry
something a column loses are kept, so a plain message stores nothing extra. On the way out
the columns win wherever they were changed since (a rule action, properties to modify, a
dead-letter reason): a kept value is used only while its column still says the same.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from proton import Data, Described, symbol, timestamp

from . import sections as sec
from .plain_values import as_text, to_amqp, to_plain

# Values that the JSON properties column gives back with their AMQP type (values.to_amqp).
_LOSSLESS = frozenset({str, bool, int, float, bytes, uuid.UUID, timestamp, type(None)})
# Properties fields by index: the ids are columns when they are strings; to, subject,
# reply-to, content-type, absolute-expiry (the broker's), group-id and reply-to-group-id are
# columns; user-id, content-encoding, creation-time and group-sequence are kept when set.
_ID_FIELDS = frozenset({0, 5})
_COLUMN_FIELDS = frozenset({2, 3, 4, 6, 8, 10, 12})
_CREATION_TIME = 9
# Message annotations the broker owns: what a sender put there is replaced or dropped.
BROKER_ANNOTATIONS = frozenset(
    {
        "x-opt-sequence-number",
        "x-opt-enqueue-sequence-number",
        "x-opt-enqueued-time",
        "x-opt-locked-until",
        "x-opt-lock-token",
        "x-opt-deadletter-source",
        "x-opt-message-state",
        "x-opt-scheduled-enqueue-time",
        "x-opt-partition-key",
    }
)


def decode_value(raw: bytes) -> Any:
    """The described value of one encoded section, as proton's Python objects."""
    data = Data()
    data.decode(raw)
    data.rewind()
    data.next()
    obj = data.get_object()
    return _owned(obj.value if isinstance(obj, Described) else obj)


def _owned(value: Any) -> Any:
    """value with proton's memoryviews (binary values point into its buffer) copied to bytes."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {_owned(k): _owned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_owned(v) for v in value]
    return value


def _header_worth_keeping(header: list[Any]) -> bool:
    """durable, priority or first-acquirer set (ttl and delivery-count are columns)."""
    return any(header[i] is not None for i in (0, 1, 3) if i < len(header))


def _annotations_worth_keeping(notes: dict[Any, Any]) -> bool:
    return any(str(k) not in BROKER_ANNOTATIONS for k in notes)


def _properties_worth_keeping(props: list[Any]) -> bool:
    for i, v in enumerate(props):
        if v is None or i in _COLUMN_FIELDS or (i in _ID_FIELDS and type(v) is str):
            continue
        return True
    return False


def _app_properties_worth_keeping(props: dict[Any, Any]) -> bool:
    return any(type(k) is not str or type(v) not in _LOSSLESS for k, v in props.items())


def keep(parts: list[sec.Section], decoded: dict[int, Any]) -> bytes | None:
    """The sections of a received message worth keeping (None when the columns hold it all).

    decoded maps the section codes the caller already decoded to their values.
    """
    kept: list[bytes] = []
    data_sections = [p for p in parts if p.code == sec.DATA]
    for part in parts:
        value = decoded.get(part.code)
        if part.code == sec.HEADER:
            worth = _header_worth_keeping(list(value or []))
        elif part.code == sec.MESSAGE_ANNOTATIONS:
            worth = _annotations_worth_keeping(dict(value or {}))
        elif part.code == sec.PROPERTIES:
            worth = _properties_worth_keeping(list(value or []))
        elif part.code == sec.APPLICATION_PROPERTIES:
            worth = _app_properties_worth_keeping(dict(value or {}))
        elif part.code == sec.DATA:
            worth = len(data_sections) > 1
        else:
            worth = part.code == sec.FOOTER
        if worth:
            kept.append(part.raw)
    return b"".join(kept) or None


@dataclass(slots=True)
class Kept:
    """A message's kept sections, decoded for encoding it again."""

    header: list[Any] = field(default_factory=list)
    annotations: dict[Any, Any] = field(default_factory=dict)
    properties: list[Any] = field(default_factory=list)
    app_properties: dict[Any, Any] | None = None
    data: list[sec.Section] = field(default_factory=list)
    footer: bytes | None = None

    @staticmethod
    def of(blob: bytes | None) -> Kept:
        """The kept sections of a stored blob (empty for None)."""
        kept = Kept()
        if not blob:
            return kept
        for part in sec.split(blob):
            if part.code == sec.DATA:
                kept.data.append(part)
            elif part.code == sec.FOOTER:
                kept.footer = part.raw
            elif part.code == sec.HEADER:
                kept.header = list(decode_value(part.raw) or [])
            elif part.code == sec.MESSAGE_ANNOTATIONS:
                kept.annotations = dict(decode_value(part.raw) or {})
            elif part.code == sec.PROPERTIES:
                kept.properties = list(decode_value(part.raw) or [])
            elif part.code == sec.APPLICATION_PROPERTIES:
                kept.app_properties = dict(decode_value(part.raw) or {})
        return kept

    def header_field(self, index: int, default: Any = None) -> Any:
        """A header field as sent, or default when no header was kept."""
        if not self.header:
            return default
        return self.header[index] if index < len(self.header) else None

    def property_field(self, index: int) -> Any:
        """A properties field as sent (None when not kept)."""
        return self.properties[index] if index < len(self.properties) else None

    def typed_id(self, index: int, column: str | None) -> Any:
        """The message or correlation id as sent while the column still names it, else the column."""
        sent = self.property_field(index)
        if sent is not None and column is not None and as_text(sent) == column:
            return sent
        return column

    def custom_annotations(self) -> dict[symbol, Any]:
        """The sender's own message annotations (the broker's are set afresh)."""
        return {symbol(str(k)): v for k, v in self.annotations.items() if str(k) not in BROKER_ANNOTATIONS}

    def app_properties_for(self, plain: dict[str, Any]) -> dict[str, Any]:
        """The application properties to send: each as sent while its stored value is unchanged."""
        typed = self.app_properties
        if typed is None:
            return {str(k): to_amqp(v) for k, v in plain.items()}
        sent = {str(k): v for k, v in typed.items()}
        out: dict[str, Any] = {}
        for k, v in plain.items():
            original = sent.get(k, _MISSING)
            if original is not _MISSING and _same(original, v):
                out[k] = original
            else:
                out[k] = to_amqp(v)
        return out

    def data_sections_for(self, body: bytes) -> list[bytes] | None:
        """The data sections as sent while they still make up body."""
        if not self.data:
            return None
        if b"".join(sec.data_payload(s) for s in self.data) != body:
            return None
        return [s.raw for s in self.data]


_MISSING = object()


def _same(original: Any, stored: Any) -> bool:
    """Whether a stored plain value is still what the typed original decodes to."""
    plain = to_plain(original)
    return type(plain) is type(stored) and bool(plain == stored)
