"""Typed application properties from the command line: `K=V`, where V reads as a JSON-ish scalar.

A rule shared by every option that types a K=V value (`emulator send --property`, `resubmit
--set-property`, the selection's `--property` and `--param`), so the same text always gives the
same type. It sits below every layer that reads it: the emulator, the operations, the selection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from sbdlq.errors import BadInput
from sbdlq.models import fits_int64

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?$")


def parse_properties(items: Iterable[str], *, option: str = "--property") -> dict[str, Any]:
    """`K=V` pairs into a dict (a later K wins); BadInput names `option` when one has no `=` or key."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"{option} {item!r}: expected KEY=VALUE")
        value = typed_value(raw)
        if isinstance(value, int) and not isinstance(value, bool) and not fits_int64(value):
            raise BadInput(
                f"{option} {item!r}: {raw} is past the 64-bit range a Service Bus property holds",
                hint=f"quote it to send it as text: {key.strip()}='\"{raw}\"'",
            )
        out[key.strip()] = value
    return out


def typed_value(raw: str) -> Any:
    """42 → int, 1.5 → float, true/false → bool, "quoted" → the string inside, else the string."""
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return raw[1:-1]
    if _INT.match(raw):
        return int(raw)
    if _FLOAT.match(raw):
        return float(raw)
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    return raw
