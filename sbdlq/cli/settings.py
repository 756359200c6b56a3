"""The global options as one `Settings` for every command: the target, the transport, the timeout
and the profile's defaults, resolved when first asked (so `--help` reads no config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click
import typer

from sbdlq.cli.notes import err, note
from sbdlq.errors import BadInput
from sbdlq.profiles import Setting, Source, Target, resolve_target


def given_setting(ctx: click.Context, name: str) -> Setting:
    """A global option's value with where it came from: the command line, the environment or its default."""
    from click.core import ParameterSource

    src = ctx.get_parameter_source(name)
    if src is ParameterSource.COMMANDLINE:
        return Setting(ctx.params[name], Source.OPTION)
    if src is ParameterSource.ENVIRONMENT:
        return Setting(ctx.params[name], Source.ENV)
    return Setting(ctx.params[name], Source.DEFAULT)


@dataclass
class Settings:
    """The global options, resolved lazily so `--help` reads no config."""

    options: dict[str, Setting] = field(default_factory=dict)
    profile: str | None = None
    timeout: str = "30s"
    verbose: bool = False
    debug: bool = False
    _target: Target | None = None

    @property
    def timeout_s(self) -> float:
        from sbdlq.timeparse import parse_duration

        prof = self.target().profile
        raw = self.timeout
        given = self.options.get("timeout", Setting(None)).source
        if given is Source.DEFAULT and prof and prof.option("timeout"):
            raw = str(prof.option("timeout"))
        seconds = parse_duration(raw, what="--timeout")
        if seconds <= 0:
            raise BadInput("--timeout must be positive")
        return seconds

    def target(self) -> Target:
        if self._target is None:
            self._target = resolve_target(options=self.options, profile_name=self.profile, warn=err)
            if self._target.level is Source.DEFAULT:
                note(f"sbdlq: using the local emulator at {self._target.value} (no target configured)")
            self.log(f"target: {self._target.describe()}")
        return self._target

    def transport(self) -> Any:
        """The transport and proxy (sbdlq.transport.Transport): option > env > profile > default.

        An explicit `--proxy` without a transport chosen anywhere means websockets, as the SDK
        itself decides for a proxy; HTTPS_PROXY alone does not switch (it serves the admin client).
        """
        from sbdlq.transport import Transport, check_transport, parse_proxy

        prof = self.target().profile
        transport, t_src = self.options.get("transport", Setting(None))
        proxy, p_src = self.options.get("proxy", Setting(None))
        t_where = "--transport" if t_src is Source.OPTION else "SBDLQ_TRANSPORT"
        p_where = "--proxy" if p_src is Source.OPTION else "HTTPS_PROXY"
        if not transport and prof is not None and prof.option("transport"):
            transport, t_where = prof.option("transport"), f"profile {prof.name}"
        if not proxy and prof is not None and prof.option("proxy"):
            proxy, p_where, p_src = prof.option("proxy"), f"profile {prof.name}", Source.PROFILE
        if not transport:
            transport = "websockets" if proxy and p_src in (Source.OPTION, Source.PROFILE) else "amqp"
        return Transport(check_transport(transport, t_where), parse_proxy(proxy, p_where) if proxy else None)

    def profile_default(self, key: str) -> Any:
        prof = self.target().profile
        return prof.option(key) if prof else None

    def log(self, text: str) -> None:
        if self.verbose or self.debug:
            err(f"sbdlq: {text}")


def settings(ctx: typer.Context) -> Settings:
    """The settings of this invocation, kept on the root context (made at the first call)."""
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = Settings()
    return root.obj


def output_format(s: Settings, given: str | None) -> str:
    """-o, else the profile's output, else table: one that every command offers."""
    from sbdlq.output.formats import check_output

    return check_output(requested_output(s, given))


def requested_output(s: Settings, given: str | None) -> str:
    """-o, else the profile's output, else table, before a command checks it against what it offers."""
    from sbdlq.output.formats import DEFAULT_OUTPUT

    return str(given or s.profile_default("output") or DEFAULT_OUTPUT)
