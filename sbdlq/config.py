"""Profiles (YAML), environment variables and the precedence that picks a target (DESIGN §2).

Precedence: command-line option > environment variable > profile > the local emulator.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbdlq.errors import BadInput

TARGET_KEYS = ("connection_string", "connection_string_env", "namespace", "emulator")
OPTION_KEYS = ("output", "timeout", "concurrency", "batch_size")


def config_path() -> Path:
    """$SBDLQ_CONFIG, else the user config dir's sbdlq/config.yaml."""
    env = os.environ.get("SBDLQ_CONFIG")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_config_dir

    return Path(user_config_dir("sbdlq", appauthor=False)) / "config.yaml"


def default_emulator_path() -> Path:
    """The embedded emulator's store in the user data dir."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("sbdlq", appauthor=False)) / "emulator.db"


@dataclass
class Profile:
    name: str
    values: dict[str, Any] = field(default_factory=dict)

    def option(self, key: str) -> Any:
        return self.values.get(key)


@dataclass
class ConfigFile:
    path: Path
    default_profile: str | None
    profiles: dict[str, Profile]
    world_readable: bool = False


def load_config(path: Path | None = None) -> ConfigFile | None:
    """The config file, or None when there is none; BadInput naming the file and field when invalid."""
    p = path or config_path()
    if not p.exists():
        return None
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot read config file {p}: {exc.strerror or exc}")
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInput(f"config file {p} is not valid YAML{where}")
    if not isinstance(data, dict):
        raise BadInput(f"config file {p}: expected a mapping at the top level")
    profiles_raw = data.get("profiles") or {}
    if not isinstance(profiles_raw, dict):
        raise BadInput(f"config file {p}: 'profiles' must be a mapping of name to settings")
    profiles: dict[str, Profile] = {}
    for name, values in profiles_raw.items():
        if not isinstance(values, dict):
            raise BadInput(f"config file {p}: profile {name!r} must be a mapping")
        unknown = set(values) - set(TARGET_KEYS) - set(OPTION_KEYS)
        if unknown:
            raise BadInput(f"config file {p}: profile {name!r} has unknown key {sorted(unknown)[0]!r}")
        targets = [k for k in TARGET_KEYS if values.get(k)]
        if len(targets) > 1:
            raise BadInput(f"config file {p}: profile {name!r} sets both {targets[0]!r} and {targets[1]!r}")
        for key in (*TARGET_KEYS, "output", "timeout"):
            if key in values and values[key] is not None and not isinstance(values[key], str):
                raise BadInput(f"config file {p}: profile {name!r} field {key!r} must be a string")
        profiles[str(name)] = Profile(str(name), dict(values))
    default = data.get("default_profile")
    if default is not None and str(default) not in profiles:
        raise BadInput(f"config file {p}: default_profile {default!r} is not a profile")
    mode = p.stat().st_mode
    readable = bool(mode & (stat.S_IRGRP | stat.S_IROTH))
    return ConfigFile(p, None if default is None else str(default), profiles, readable)


@dataclass
class Target:
    """Where commands go: the emulator store, a connection string, or a namespace."""

    kind: str  # emulator | connection_string | namespace
    value: str
    source: str  # option | env | profile NAME | default
    profile: Profile | None = None

    def describe(self) -> str:
        """For --verbose: never the secret."""
        if self.kind == "emulator":
            return f"emulator store {self.value} (from {self.source})"
        if self.kind == "namespace":
            return f"namespace {self.value} with DefaultAzureCredential (from {self.source})"
        from sbdlq.connstr import parse_connection_string

        info = parse_connection_string(self.value)
        return f"{info.host} with a connection string (from {self.source})"


def resolve_target(
    *,
    options: dict[str, tuple[str | None, str]],
    profile_name: str | None,
    warn: Any = None,
) -> Target:
    """Pick the target by precedence; options maps key → (value, 'option'|'env'|'default')."""
    for level in ("option", "env"):
        given = [(k, v) for k, (v, src) in options.items() if v and src == level]
        if len(given) > 1:
            names = " and ".join("--" + k.replace("_", "-") for k, _ in given)
            raise BadInput(f"conflicting options: {names}", hint="give only one target")
        if given:
            key, value = given[0]
            return _target(key, value, level, None)
    cfg = load_config()
    name = profile_name or (cfg.default_profile if cfg else None)
    if name:
        if cfg is None or name not in cfg.profiles:
            where = cfg.path if cfg else config_path()
            raise BadInput(f"no profile {name!r} in {where}")
        prof = cfg.profiles[name]
        if prof.values.get("connection_string") and cfg.world_readable and warn:
            warn(f"warning: {cfg.path} holds a secret and is readable by group or others (chmod 600 it)")
        for key in TARGET_KEYS:
            value = prof.values.get(key)
            if not value:
                continue
            if key == "connection_string_env":
                env_value = os.environ.get(str(value))
                if not env_value:
                    raise BadInput(f"profile {name!r}: environment variable {value} is not set")
                return _target("connection_string", env_value, f"profile {name}", prof)
            return _target(key, str(value), f"profile {name}", prof)
        return Target("emulator", str(default_emulator_path()), f"profile {name}", prof)
    return Target("emulator", str(default_emulator_path()), "default")


def _target(key: str, value: str, source: str, prof: Profile | None) -> Target:
    if key == "emulator":
        return Target("emulator", str(Path(value).expanduser()), source, prof)
    if key == "connection_string":
        from sbdlq.connstr import parse_connection_string

        parse_connection_string(value)  # fail early, with a line that names what's wrong
        return Target("connection_string", value, source, prof)
    if key == "namespace":
        ns = value.strip()
        if "://" in ns:
            ns = ns.split("://", 1)[1]
        ns = ns.strip("/")
        if "." not in ns:
            ns = f"{ns}.servicebus.windows.net"
        return Target("namespace", ns, source, prof)
    raise BadInput(f"unknown target {key}")
