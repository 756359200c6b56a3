"""A future azure-servicebus, simulated: one private name gone or answering differently, for sbdlq only.

`hidden(owner, name)`: while the context lasts, reading `name` on `owner` (a class: the
attribute or method of its instances; a module: a module attribute, so `from module import
name` fails) from code whose module is `sbdlq` or `sbdlq.*` raises AttributeError, as after a
rename. The SDK's own code still sees it, so the SDK keeps working. A write from sbdlq lands
in a stray attribute that only sbdlq reads back, as a write to a renamed attribute would.

`swapped(owner, name, change)`: sbdlq sees `change(original)` instead (a reply of another
shape, a callback called another way); the SDK sees the original.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_MISSING = object()


def _from_sbdlq(depth: int) -> bool:
    """Whether the frame `depth` levels above the caller belongs to sbdlq's code."""
    name = sys._getframe(depth + 1).f_globals.get("__name__", "")
    return name == "sbdlq" or name.startswith("sbdlq.")


class _Seen:
    """A data descriptor standing in for a class attribute: what each side sees of it."""

    def __init__(self, name: str, original: Any, for_sbdlq: Callable[[Any, Any], Any] | None) -> None:
        self.name = name
        self.original = original
        self.for_sbdlq = for_sbdlq  # None: hidden

    def _real(self, obj: Any, owner: type) -> Any:
        if obj is not None and self.name in vars(obj):
            return vars(obj)[self.name]
        if self.original is _MISSING:
            raise AttributeError(self.name)
        getter = getattr(self.original, "__get__", None)
        return getter(obj, owner) if getter is not None else self.original

    def __get__(self, obj: Any, owner: type) -> Any:
        if not _from_sbdlq(1):
            return self._real(obj, owner)
        if self.for_sbdlq is not None:
            return self.for_sbdlq(obj, self._real(obj, owner))
        stray = vars(obj).get(f"_stray{self.name}", _MISSING) if obj is not None else _MISSING
        if stray is _MISSING:
            raise AttributeError(f"{owner.__name__!r} object has no attribute {self.name!r}", name=self.name)
        return stray

    def __set__(self, obj: Any, value: Any) -> None:
        if _from_sbdlq(1) and self.for_sbdlq is None:
            vars(obj)[f"_stray{self.name}"] = value
        else:
            vars(obj)[self.name] = value

    def __delete__(self, obj: Any) -> None:
        vars(obj).pop(self.name, None)


class _SeeingModule(types.ModuleType):
    """A module whose attribute `_seen_name` sbdlq's code sees as `_seen_change` says."""

    _seen_name: str
    _seen_change: Callable[[Any], Any] | None

    def __getattribute__(self, attr: str) -> Any:
        value = super().__getattribute__(attr)
        if attr == super().__getattribute__("_seen_name") and _from_sbdlq(1):
            change = super().__getattribute__("_seen_change")
            if change is None:
                raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}", name=attr)
            return change(value)
        return value


@contextmanager
def _seen(owner: Any, name: str, change: Callable[[Any], Any] | None) -> Iterator[None]:
    if isinstance(owner, types.ModuleType):
        getattr(owner, name)  # it must exist today
        previous = owner.__class__
        owner.__class__ = _SeeingModule
        owner._seen_name, owner._seen_change = name, change  # type: ignore[attr-defined]
        try:
            yield
        finally:
            owner.__class__ = previous
            del owner._seen_name, owner._seen_change  # type: ignore[attr-defined]
        return
    own = owner.__dict__.get(name, _MISSING)
    # Inherited methods too: the class's own entry, else the first base's (else an instance attribute).
    inherited = next((k.__dict__[name] for k in owner.__mro__ if name in k.__dict__), _MISSING)
    per_object = None if change is None else (lambda _obj, real: change(real))
    setattr(owner, name, _Seen(name, inherited, per_object))
    try:
        yield
    finally:
        if own is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, own)


def hidden(owner: Any, name: str) -> Any:
    """sbdlq's code no longer finds `owner.name` (see the module docstring)."""
    return _seen(owner, name, None)


def swapped(owner: Any, name: str, change: Callable[[Any], Any]) -> Any:
    """sbdlq's code sees `change(original)` for `owner.name` (see the module docstring)."""
    return _seen(owner, name, change)
