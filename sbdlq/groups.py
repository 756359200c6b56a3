"""The groups `inspect-reason` counts: by a key, per entity across a namespace, by fingerprint."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sbdlq.models import iso


@dataclass(slots=True)
class ReasonGroup:
    key: str
    count: int = 0
    first_enqueued: datetime | None = None
    last_enqueued: datetime | None = None
    sample_sequence_numbers: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "count": self.count,
            "first_enqueued": iso(self.first_enqueued),
            "last_enqueued": iso(self.last_enqueued),
            "sample_sequence_numbers": list(self.sample_sequence_numbers),
        }


@dataclass(slots=True)
class EntityReasonGroup(ReasonGroup):
    """A group of one queue's or subscription's DLQ, in a namespace-wide inspect-reason."""

    entity: str = ""

    def to_json(self) -> dict[str, Any]:
        # Explicit base call: zero-argument super() fails in slotted dataclasses.
        return {"entity": self.entity, **ReasonGroup.to_json(self)}


@dataclass(slots=True)
class FingerprintGroup(ReasonGroup):
    """A group of `inspect-reason --by fingerprint`: its key is the fingerprint id (sbdlq/fingerprint.py)."""

    reason: str = ""
    template: str = ""
    #: namespace-wide: the entities whose DLQ holds the group (one name each, never the messages)
    entities: set[str] | None = None
    #: namespace-wide: the entity the sample sequence numbers are of (the first one found)
    sample_entity: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "key": self.key,
            "fingerprint": self.key,
            "reason": self.reason,
            "template": self.template,
            **{k: v for k, v in ReasonGroup.to_json(self).items() if k != "key"},
        }
        if self.entities is not None:
            doc["entities"] = len(self.entities)
            doc["sample_entity"] = self.sample_entity
        return doc
