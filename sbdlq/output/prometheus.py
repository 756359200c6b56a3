"""`count -o prometheus`: counts as gauges in the Prometheus text exposition format.

Written for node_exporter's textfile collector: one metric family, one line per series,
label values escaped as the format requires, and a final newline (the collector ignores a
file whose last line is cut).
"""

from __future__ import annotations

from collections.abc import Iterable

from sbdlq.models import COUNT_NAMES, Counts

FORMAT = "prometheus"
METRIC = "sbdlq_messages"
#: the `queue` label's values, in the order each entity's series are written (models.COUNT_FIELDS)
QUEUES = COUNT_NAMES
HELP = "Messages in a Service Bus queue or subscription, by sub-queue (sbdlq count)."

_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


def label_value(text: str) -> str:
    """A label value escaped for the text format: backslash, double quote and newline."""
    return text.translate(_ESCAPES)


def gauges(counts: Iterable[Counts]) -> str:
    """The `sbdlq_messages` family: HELP, TYPE, then one series per count (COUNT_FIELDS) per entity."""
    lines = [f"# HELP {METRIC} {HELP}", f"# TYPE {METRIC} gauge"]
    for c in counts:
        entity = label_value(c.entity)
        for queue in QUEUES:
            lines.append(f'{METRIC}{{entity="{entity}",queue="{queue}"}} {getattr(c, queue)}')
    return "\n".join(lines) + "\n"
