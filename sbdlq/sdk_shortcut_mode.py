"""The SDK shortcut mode setting (`SBDLQ_SDK_SHORTCUTS`, a profile's `sdk_shortcuts`): its values, checked once.

Below both readers: the profiles (a profile's key) and the Service Bus backend (the variable,
backends/servicebus/shortcuts.py), so the backend needs nothing of the profiles.
"""

from __future__ import annotations

from sbdlq.errors import BadInput

#: the values of SBDLQ_SDK_SHORTCUTS and a profile's sdk_shortcuts (backends/servicebus/shortcuts.py)
SDK_SHORTCUT_MODES = ("auto", "on", "off")
SDK_SHORTCUTS_ENV = "SBDLQ_SDK_SHORTCUTS"


def check_shortcut_mode(value: object, where: str) -> str:
    """auto, on or off (YAML's booleans for on and off too); BadInput names where a bad value came from."""
    text = ("on" if value else "off") if isinstance(value, bool) else str(value).strip().lower()
    if text not in SDK_SHORTCUT_MODES:
        raise BadInput(f"{where} must be one of {', '.join(SDK_SHORTCUT_MODES)}, not {value!r}")
    return text
