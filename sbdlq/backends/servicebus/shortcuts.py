"""Whether the backend may take the private SDK shortcuts of sdk_compat.py, and which it gave up.

The shortcuts (a run of settlements in one disposition, batch renewal, batch delete, faster
opens and closes) reach into azure-servicebus privates, which any release may rename. They
are used only where that is known to be safe:

- `SBDLQ_SDK_SHORTCUTS` (or a profile's `sdk_shortcuts`) is `on`, `off` or `auto` (the
  default). `auto` is on for the releases CI tests (TESTED_LOWEST to TESTED_HIGHEST), off
  for any other: a release nobody ran the suite on gets the public SDK API only.
- A shortcut that finds a private missing, or answering in a shape it does not know, is
  given up for the rest of the run (`fall_back`): the operation goes the public way, one
  line says so with `-v`, and results name it (`sdk_fallbacks`).

Reading the installed release costs no azure import (package metadata only).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

from sbdlq.backends.servicebus import amqp_body, sdk_compat
from sbdlq.errors import BadInput
from sbdlq.sdk_shortcut_mode import SDK_SHORTCUTS_ENV as ENV_VAR
from sbdlq.sdk_shortcut_mode import check_shortcut_mode

#: the azure-servicebus releases `.ci/run` runs the suite on, shortcuts on and off. pyproject.toml
#: pins from TESTED_LOWEST to below the next minor of TESTED_HIGHEST (tests/unit/test_sdk_compat.py):
#: a patch release past TESTED_HIGHEST installs, and runs on the public SDK API until it is tested.
T = TypeVar("T")

TESTED_LOWEST = (7, 15, 0)
TESTED_HIGHEST = (7, 15, 0)

TESTED_RANGE = f"range {'.'.join(map(str, TESTED_LOWEST))} to {'.'.join(map(str, TESTED_HIGHEST))}"
#: the releases sbdlq supports: what pyproject.toml pins (TESTED_LOWEST to below the next minor)
SUPPORTED_BELOW = (TESTED_HIGHEST[0], TESTED_HIGHEST[1] + 1)
SUPPORTED_PIN = f"azure-servicebus>={'.'.join(map(str, TESTED_LOWEST))},<{'.'.join(map(str, SUPPORTED_BELOW))}"
SUPPORTED_RANGE = f"{'.'.join(map(str, TESTED_LOWEST))} to below {'.'.join(map(str, SUPPORTED_BELOW))}"


@cache
def sdk_version() -> str | None:
    """The installed azure-servicebus release (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("azure-servicebus")
    except PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...] | None:
    """(7, 15, 0) of "7.15.0"; None for a pre-release or a local build ("7.16.0b1")."""
    parts = version.split(".")
    if not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def unsupported(version: str | None) -> bool:
    """Whether version is a release outside what sbdlq supports (None, not installed: not said)."""
    if version is None:
        return False
    release = _release(version)
    return release is None or not TESTED_LOWEST <= release < SUPPORTED_BELOW


def tested(version: str | None) -> bool:
    """Whether CI runs the suite on this azure-servicebus release."""
    release = _release(version) if version else None
    return release is not None and TESTED_LOWEST <= release <= TESTED_HIGHEST


@dataclass
class Shortcuts:
    """The shortcut policy of one backend: on or off, why, and what it gave up during the run."""

    enabled: bool
    why: str
    say: Callable[[str], None] = lambda _: None
    #: the shortcuts given up during this run, in the order they were
    fallbacks: list[str] = field(default_factory=list)

    @classmethod
    def resolve(cls, mode: str | None, *, say: Callable[[str], None] = lambda _: None) -> Shortcuts:
        """The policy for a mode (None: the environment's, else auto) and the installed SDK."""
        where = f"mode {mode!r}"
        if mode is None:
            mode, where = os.environ.get(ENV_VAR) or "auto", ENV_VAR
        mode = check_shortcut_mode(mode, where)
        version = sdk_version() or "unknown"
        if mode == "off":
            return cls(False, f"off ({where})", say)
        if mode == "on":
            return cls(True, f"on ({where}; azure-servicebus {version})", say)
        if tested(version):
            return cls(True, "on (auto: a tested release)", say)
        return cls(False, f"off (auto: azure-servicebus {version} is outside the tested {TESTED_RANGE})", say)

    def use(self, name: str) -> bool:
        """Whether the shortcut `name` may be taken now."""
        return self.enabled and name not in self.fallbacks

    def attempt(self, name: str, probe: Callable[[], T], default: T) -> T:
        """probe() where the shortcut `name` may be taken; default where it is off, or (given up
        here) where the probe finds a private missing (sdk_compat.Unavailable)."""
        if not self.use(name):
            return default
        try:
            return probe()
        except sdk_compat.Unavailable as exc:
            self.fall_back(name, exc)
            return default

    def fall_back(self, name: str, why: object) -> None:
        """Give up a shortcut for the rest of the run, saying so once (with -v)."""
        if name in self.fallbacks:
            return
        self.fallbacks.append(name)
        detail = f"{type(why).__name__}: {why}" if isinstance(why, BaseException) else str(why)
        self.say(f"SDK shortcut {name} given up ({detail}); using the public SDK API for it")


def describe() -> str:
    """`azure-servicebus 7.15.0, shortcuts on (auto: a tested release)`, for --version and config show."""
    try:
        state = Shortcuts.resolve(None).why
    except BadInput as exc:
        state = f"unknown ({exc.message})"
    return f"azure-servicebus {sdk_version() or 'not installed'}, shortcuts {state}"


class SdkShims:
    """The shims of sdk_compat.py behind the policy: with shortcuts off (or given up), the public
    SDK's behaviour (and amqp_body.py for bodies). What each gives up is named in `Shortcuts.fallbacks`."""

    def __init__(self, shortcuts: Shortcuts) -> None:
        self.shortcuts = shortcuts

    def running(self, handler: Any) -> bool:
        """Whether a handler is open (off: assumed open; a call on a closed one fails and is translated)."""
        return sdk_compat.handler_running(handler) if self.shortcuts.use("link_state") else True

    def client_of(self, handler: Any) -> Any:
        """The handler's AMQP client of the moment (off: None, the same for every message)."""
        return sdk_compat.amqp_client_of(handler) if self.shortcuts.use("link_state") else None

    def half_torn(self, handler: Any) -> bool:
        """Whether a handler lost its AMQP client while marked open (off: never known)."""
        return sdk_compat.half_torn(handler) if self.shortcuts.use("link_state") else False

    def prepared(self, handler: Any) -> Any:
        """The handler with its opens prompt and refusals not retried, where the shortcut is on."""
        if self.shortcuts.use("prompt_open"):
            try:
                sdk_compat.prompt_open(sdk_compat.no_retry_on_refusal(handler))
            except sdk_compat.SHAPE_ERRORS as exc:
                self.shortcuts.fall_back("prompt_open", exc)
        return handler

    async def stop_credit(self, receiver: Any) -> None:
        """Take back unused link credit, where the shortcut is on and works on this SDK."""
        if not self.shortcuts.use("stop_credit"):
            return
        try:
            await sdk_compat.stop_credit(receiver)
        except sdk_compat.Unavailable as exc:
            self.shortcuts.fall_back("stop_credit", exc)

    def stop_keep_alive(self, handler: Any) -> None:
        """Cancel the keep-alive task before a close, where the shortcut is on."""
        if self.shortcuts.use("fast_close"):
            try:
                sdk_compat.stop_keep_alive(handler)
            except sdk_compat.SHAPE_ERRORS as exc:
                self.shortcuts.fall_back("fast_close", exc)

    def encode_body(self, *, value: Any = None, sequence: list[Any] | None = None) -> bytes:
        """amqp-value / amqp-sequence sections: by the SDK's encoder where the shortcut is on, else amqp_body.py."""
        if self.shortcuts.use("body_codec"):
            try:
                return sdk_compat.encode_amqp_body(value=value, sequence=sequence)
            except sdk_compat.Unavailable as exc:
                self.shortcuts.fall_back("body_codec", exc)
        return amqp_body.encode(value=value, sequence=sequence)

    def decode_body(self, body: bytes) -> tuple[Any, list[Any] | None]:
        """(value, sequence) of encoded sections: by the SDK's decoder where the shortcut is on, else amqp_body.py."""
        if self.shortcuts.use("body_codec"):
            try:
                return sdk_compat.decode_amqp_body(body)
            except sdk_compat.Unavailable as exc:
                self.shortcuts.fall_back("body_codec", exc)
        return amqp_body.decode(body)
