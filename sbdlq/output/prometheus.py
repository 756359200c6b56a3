"""Prometheus text: gauges in the text exposition format (`-o prometheus`, `formats.Prometheus`).

Written for node_exporter's textfile collector: each metric family's HELP and TYPE, one line
per series, label values escaped as the format requires, and a final newline (the collector
ignores a file whose last line is cut). `count` writes one family (`gauges`); `apply` its
run's families (policy/report.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sbdlq.models import COUNT_NAMES, Counts

METRIC = "sbdlq_messages"
#: the `queue` label's values, in the order each entity's series are written (models.COUNT_FIELDS)
QUEUES = COUNT_NAMES
HELP = "Messages in a Service Bus queue or subscription, by sub-queue (sbdlq count)."

_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


@dataclass
class Family:
    """One metric family of gauges: its name, its HELP text and its series (labels, value), in order."""

    name: str
    help: str
    series: list[tuple[dict[str, str], int]] = field(default_factory=list)

    def add(self, labels: Mapping[str, str], value: int) -> None:
        self.series.append((dict(labels), value))


def label_value(text: str) -> str:
    """A label value escaped for the text format: backslash, double quote and newline."""
    return text.translate(_ESCAPES)


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{label_value(value)}"' for key, value in labels.items()) + "}"


def exposition(families: Iterable[Family]) -> str:
    """The text format: each family's HELP and TYPE (a family without series too), then its series."""
    lines = []
    for family in families:
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} gauge"]
        lines += [f"{family.name}{_labels(labels)} {value}" for labels, value in family.series]
    return "\n".join(lines) + "\n"


def gauges(counts: Iterable[Counts]) -> list[Family]:
    """`count`'s `sbdlq_messages` family: one series per count (COUNT_FIELDS) per entity."""
    family = Family(METRIC, HELP)
    for c in counts:
        for queue in QUEUES:
            family.add({"entity": c.entity, "queue": queue}, getattr(c, queue))
    return [family]
