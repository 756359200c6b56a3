"""Profiles (YAML), environment variables and the precedence that picks a target (DESIGN §2).

Precedence: command-line option > environment variable > profile > the local emulator.
A profile's target counts at the level the profile was chosen at: `--profile` on the
command line, `SBDLQ_PROFILE` in the environment, `default_profile` in the config file.
Two targets chosen at the same level are a usage error, never a silent pick.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from sbdlq.errors import BadInput, UnknownTargetKind
from sbdlq.sdk_shortcut_mode import check_shortcut_mode

# Target keys in the order a profile is read; a profile sets at most one of them.
TARGET_KEYS = ("connection_string", "connection_string_env", "namespace", "emulator")
# Per-profile defaults for command options.
OPTION_KEYS = ("output", "timeout", "concurrency", "batch_size", "transport", "proxy", "sdk_shortcuts")
# Targets that come from options and environment variables (a profile adds connection_string_env).
TARGET_OPTIONS = ("connection_string", "namespace", "emulator")
TOP_LEVEL_KEYS = ("default_profile", "profiles")
ENV_VARS = {
    "connection_string": "SBDLQ_CONNECTION_STRING",
    "namespace": "SBDLQ_NAMESPACE",
    "emulator": "SBDLQ_EMULATOR",
    "profile": "SBDLQ_PROFILE",
    "timeout": "SBDLQ_TIMEOUT",
    "transport": "SBDLQ_TRANSPORT",
    "proxy": "HTTPS_PROXY",  # the variable every HTTP client already honours (https_proxy too)
}


class Source(StrEnum):
    """Where a setting came from, strongest first (DESIGN §2 precedence)."""

    OPTION = "option"
    ENV = "env"
    PROFILE = "profile"
    DEFAULT = "default"


# The levels a target can be chosen at, strongest first (the default is what's left).
_LEVELS = (Source.OPTION, Source.ENV, Source.PROFILE)


class Setting(NamedTuple):
    """A global option's value and where it came from (a pair, so it unpacks as `value, source`)."""

    value: str | None
    source: Source = Source.DEFAULT


# The global options by key (connection_string, namespace, emulator, timeout, profile).
GlobalOptions = Mapping[str, Setting]


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


def flag(key: str) -> str:
    """The command-line option for a setting key."""
    return "--" + key.replace("_", "-")


@dataclass
class Profile:
    """One entry of `profiles:`: at most one target key plus option defaults."""

    name: str
    values: dict[str, Any] = field(default_factory=dict)

    def option(self, key: str) -> Any:
        """A per-profile option default, or None."""
        return self.values.get(key)

    @property
    def target_key(self) -> str | None:
        """The target key this profile sets, if any."""
        return next((k for k in TARGET_KEYS if self.values.get(k)), None)


@dataclass
class ConfigFile:
    """A parsed and validated config file."""

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
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise BadInput(f"config file {p}: cannot read it: {reason}")
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        raise BadInput(f"config file {p}: invalid YAML{where}" + (f": {problem}" if problem else ""))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadInput(f"config file {p}: expected a mapping with default_profile and profiles at the top level")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise BadInput(f"config file {p}: unknown field {key!r}{_suggest(key, TOP_LEVEL_KEYS)}")
    profiles_raw = data.get("profiles")
    if profiles_raw is None:
        profiles_raw = {}
    if not isinstance(profiles_raw, dict):
        raise BadInput(f"config file {p}: field 'profiles' must be a mapping of profile names to settings")
    profiles: dict[str, Profile] = {}
    for raw_name, values in profiles_raw.items():
        name = str(raw_name)
        profiles[name] = Profile(name, _check_profile(p, name, values))
    default = data.get("default_profile")
    if default is not None and not isinstance(default, str):
        raise BadInput(f"config file {p}: field 'default_profile' must be a profile name")
    if default is not None and default not in profiles:
        raise BadInput(f"config file {p}: default_profile {default!r} is not a profile{_known(profiles)}")
    readable = False
    if os.name == "posix":
        readable = bool(p.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH))
    return ConfigFile(p, default, profiles, readable)


def _check_profile(p: Path, name: str, values: Any) -> dict[str, Any]:
    """One profile's settings, type-checked; BadInput names `profiles.NAME.FIELD`."""
    where = f"config file {p}: profiles.{name}"
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise BadInput(f"{where} must be a mapping of settings")
    known = (*TARGET_KEYS, *OPTION_KEYS)
    for key in values:
        if key not in known:
            raise BadInput(f"{where}: unknown field {key!r}{_suggest(str(key), known)}")
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key in TARGET_KEYS:
            if not isinstance(value, str) or not value.strip():
                raise BadInput(f"{where}.{key} must be a non-empty string")
            out[key] = value.strip()
        elif key == "output":
            from sbdlq.output.formats import OUTPUTS

            if value not in OUTPUTS:
                raise BadInput(f"{where}.output must be one of {', '.join(OUTPUTS)}")
            out[key] = value
        elif key == "timeout":
            from sbdlq.timeparse import parse_duration

            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)  # `timeout: 10` in YAML: seconds, as everywhere
            if not isinstance(value, str):
                raise BadInput(f"{where}.timeout must be a duration such as 30s or 2m")
            try:
                seconds = parse_duration(value)
            except BadInput:
                raise BadInput(f"{where}.timeout must be a duration such as 30s or 2m, not {value!r}")
            if seconds <= 0:
                raise BadInput(f"{where}.timeout must be positive")
            out[key] = value
        elif key in ("transport", "proxy"):
            from sbdlq.transport import check_transport, parse_proxy

            if not isinstance(value, str):
                raise BadInput(f"{where}.{key} must be a string")
            if key == "transport":
                out[key] = check_transport(value, f"{where}.transport")
            else:  # parsed now: a bad URL is named early, and its password registered with redact()
                parse_proxy(value, f"{where}.proxy")
                out[key] = value.strip()
        elif key == "sdk_shortcuts":
            out[key] = check_shortcut_mode(value, f"{where}.sdk_shortcuts")
        else:  # concurrency, batch_size
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadInput(f"{where}.{key} must be a whole number of at least 1")
            out[key] = value
    targets = [k for k in TARGET_KEYS if k in out]
    if len(targets) > 1:
        raise BadInput(f"{where} sets both {targets[0]!r} and {targets[1]!r}; a profile has one target")
    if "emulator" in out:
        # A relative store path is read against the config file's folder, wherever sbdlq runs.
        store = Path(out["emulator"]).expanduser()
        out["emulator"] = store if store.is_absolute() else os.path.normpath(p.parent.absolute() / store)
        out["emulator"] = str(out["emulator"])
    if "connection_string" in out:
        from sbdlq.connstr import parse_connection_string

        try:
            # Fails early and registers the key with redact(), before anything prints.
            parse_connection_string(out["connection_string"])
        except BadInput as exc:
            raise BadInput(f"{where}.connection_string: {exc.message}", hint=exc.hint)
    return out


def _suggest(key: str, known: tuple[str, ...]) -> str:
    from sbdlq.nearest import closest

    close = closest(key, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"


def _known(profiles: dict[str, Profile]) -> str:
    return f" (profiles: {', '.join(profiles)})" if profiles else " (the file has no profiles)"


@dataclass
class Target:
    """Where commands go: the emulator store, a connection string, or a namespace."""

    kind: str  # emulator | connection_string | namespace
    value: str
    level: Source  # the precedence level that chose it
    profile: Profile | None = None
    # Where exactly the value came from, for `config show`: `--namespace`, `SBDLQ_NAMESPACE`,
    # `profile prod`, `profile staging ($STAGING_SB_CONN)`, `default`.
    origin: str = ""

    @property
    def source(self) -> str:
        """For messages: `option`, `env`, `profile NAME` or `default`."""
        if self.level is Source.PROFILE and self.profile is not None:
            return f"profile {self.profile.name}"
        return self.level.value

    def describe(self) -> str:
        """For --verbose: never the secret."""
        where = self.origin or self.source
        if self.kind == "emulator":
            return f"emulator store {self.value} (from {where})"
        if self.kind == "namespace":
            return f"namespace {self.value} with DefaultAzureCredential (from {where})"
        if self.kind != "connection_string":
            raise UnknownTargetKind(f"unknown target kind {self.kind!r}")
        from sbdlq.connstr import parse_connection_string

        info = parse_connection_string(self.value)
        return f"{info.host} with a connection string (from {where})"


@dataclass
class ProfileChoice:
    """The profile in effect and the level it was chosen at (option, env or profile)."""

    name: str
    level: Source
    config: ConfigFile
    profile: Profile

    @property
    def label(self) -> str:
        """How the choice was made, for messages: `--profile prod`, `SBDLQ_PROFILE=prod`, `default_profile prod`."""
        if self.level is Source.OPTION:
            return f"--profile {self.name}"
        if self.level is Source.ENV:
            return f"{ENV_VARS['profile']}={self.name}"
        return f"default_profile {self.name}"


def choose_profile(options: GlobalOptions, profile_name: str | None) -> ProfileChoice | None:
    """The profile in effect: --profile / SBDLQ_PROFILE, else the file's default_profile."""
    given = options.get("profile")
    name, src = given if given is not None else Setting(profile_name)
    # Without a recorded source the profile counts at the config-file level (the weakest).
    level = src if src in (Source.OPTION, Source.ENV) else Source.PROFILE
    cfg = load_config()
    if not name:
        if cfg is None or cfg.default_profile is None:
            return None
        return ProfileChoice(cfg.default_profile, Source.PROFILE, cfg, cfg.profiles[cfg.default_profile])
    asked = {Source.OPTION: "--profile", Source.ENV: ENV_VARS["profile"]}.get(level, "profile")
    if cfg is None:
        raise BadInput(f"{asked} {name!r}: no config file at {config_path()}", hint="see `sbdlq config path`")
    if name not in cfg.profiles:
        raise BadInput(f"{asked} {name!r}: no such profile in config file {cfg.path}{_known(cfg.profiles)}")
    return ProfileChoice(name, level, cfg, cfg.profiles[name])


def resolve_target(
    *,
    options: GlobalOptions,
    profile_name: str | None = None,
    warn: Any = None,
) -> Target:
    """Pick the target by precedence from the global options, each a Setting.

    options may also hold `profile`; without it `profile_name` counts at the config-file level.
    """
    _refuse_empty_targets(options)
    choice = choose_profile(options, profile_name)
    prof = choice.profile if choice else None
    for level in _LEVELS:
        given = [(k, v) for k, (v, src) in _target_options(options) if v and src is level]
        labels = [flag(k) if level is Source.OPTION else ENV_VARS[k] for k, _ in given]
        # The chosen profile's target competes at the level the profile was chosen at.
        here = choice if choice is not None and choice.level == level and choice.profile.target_key else None
        if here is not None:
            labels.append(here.label)
        if len(labels) > 1:
            if level is Source.OPTION:
                raise BadInput(f"conflicting options: {' and '.join(labels)}", hint="give only one target")
            if level is Source.ENV:
                raise BadInput(f"conflicting environment variables: {' and '.join(labels)}", hint="set only one target")
        if given:
            key, value = given[0]
            return _target(key, value, level, labels[0], prof)
        if here is not None:
            return _profile_target(here, warn)
    return Target("emulator", str(default_emulator_path()), Source.DEFAULT, prof, "default")


def _refuse_empty_targets(options: GlobalOptions) -> None:
    """A target given empty is an error, never "not given": `--connection-string "$UNSET"` in a CI
    step would otherwise run against the local emulator and report success."""
    for key, (value, source) in _target_options(options):
        if source is Source.OPTION and value is not None and not str(value).strip():
            raise BadInput(f"{flag(key)} was given an empty value", hint="give the target, or leave the option out")
    if any(source is Source.OPTION and value for _, (value, source) in _target_options(options)):
        return  # a target option wins over every variable, empty or not
    for key in TARGET_OPTIONS:
        variable = ENV_VARS[key]
        raw = os.environ.get(variable)
        if raw is not None and not raw.strip():
            raise BadInput(f"environment variable {variable} is set but empty", hint="set it to a target, or unset it")


def _target_options(options: GlobalOptions) -> list[tuple[str, Setting]]:
    # Only target keys: options also carries timeout (and profile), which choose no target.
    return [(k, options[k]) for k in TARGET_OPTIONS if k in options]


def _profile_target(choice: ProfileChoice, warn: Any) -> Target:
    prof, cfg = choice.profile, choice.config
    key = prof.target_key
    value = str(prof.values[key]) if key else ""
    where = f"config file {cfg.path}: profiles.{prof.name}.{key}"
    if key == "connection_string" and cfg.world_readable and warn:
        warn(f"sbdlq: warning: {cfg.path} holds a secret and is readable by group or others (chmod 600 it)")
    if key == "connection_string_env":
        env_value = os.environ.get(value)
        if not env_value:
            raise BadInput(f"{where}: environment variable {value} is not set", hint="export it, or pick a target")
        origin = f"profile {prof.name} (${value})"
        return _target("connection_string", env_value, Source.PROFILE, origin, prof, where=where)
    assert key is not None
    return _target(key, value, Source.PROFILE, f"profile {prof.name}", prof, where=where)


def _target(key: str, value: str, level: Source, origin: str, prof: Profile | None, *, where: str = "") -> Target:
    """A Target from one setting; BadInput prefixed with where the bad value came from."""
    where = where or origin
    if key == "emulator":
        return Target("emulator", str(Path(value).expanduser()), level, prof, origin)
    if key == "connection_string":
        from sbdlq.connstr import parse_connection_string

        try:
            parse_connection_string(value)  # fail early, with a line that names what's wrong
        except BadInput as exc:
            raise BadInput(f"{where}: {exc.message}", hint=exc.hint)
        return Target("connection_string", value, level, prof, origin)
    if key == "namespace":
        ns = value.strip()
        if "://" in ns:
            ns = ns.split("://", 1)[1]
        ns = ns.strip("/")
        if not ns or any(c.isspace() or c in "/;@" for c in ns):
            raise BadInput(f"{where}: invalid namespace {value!r}", hint="use NAME or NAME.servicebus.windows.net")
        if "." not in ns:
            ns = f"{ns}.servicebus.windows.net"
        return Target("namespace", ns, level, prof, origin)
    raise UnknownTargetKind(f"unknown target {key}")
