"""`sbdlq config`: where the config file is, which profiles it holds, and what applies now.

Nothing here prints a secret: connection strings appear with their key masked, and
`config list` shows only the endpoint of a profile's connection string.
"""

import os
from typing import Annotated, Any

import click
import typer

from sbdlq.cli.completion import complete_profile
from sbdlq.cli.error_path import handled
from sbdlq.cli.notes import err
from sbdlq.cli.options import Output
from sbdlq.cli.settings import Settings
from sbdlq.errors import BadInput
from sbdlq.profiles import ENV_VARS, Setting, Source, Target, flag

app = typer.Typer(
    name="config",
    help="Profiles: where the config file is, what it holds, and which settings apply.",
    no_args_is_help=True,
)


@app.command("path")
def path_cmd() -> None:
    """Print the config file's path: $SBDLQ_CONFIG, else the user config dir's sbdlq/config.yaml."""
    from sbdlq.profiles import config_path

    typer.echo(str(config_path()))


@app.command("list")
def list_cmd(ctx: typer.Context, output: Output = None) -> None:
    """List the profiles with what each one targets, marking the default (never a secret)."""
    from sbdlq.output.formats import DEFAULT_OUTPUT, check_output, draws_table
    from sbdlq.profiles import config_path, load_config

    with handled(ctx):
        fmt = check_output(output or DEFAULT_OUTPUT)
        cfg = load_config()
        records = (
            [] if cfg is None else [_profile_record(p, p.name == cfg.default_profile) for p in cfg.profiles.values()]
        )
    if cfg is None:
        err(f"sbdlq: no config file at {config_path()}")
    elif not records:
        err(f"sbdlq: no profiles in {cfg.path}")
    if not draws_table(fmt, None):
        _write(records, fmt)
    elif records:
        from sbdlq.output.report_tables import plain_table

        plain_table(
            ["default", "name", "target", "value", "options"],
            [
                [
                    "*" if r["default"] else "",
                    r["name"],
                    r["target"] or "-",
                    r["value"] or "-",
                    " ".join(f"{k}={v}" for k, v in r["options"].items()) or "-",
                ]
                for r in records
            ],
        )


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(
            help="A profile to show on its own; none: what this command line and environment resolve to.",
            autocompletion=complete_profile,
            show_default=False,
        ),
    ] = None,
    output: Output = None,
) -> None:
    """Show the effective settings and where each came from: option, env, profile or default."""
    from sbdlq.output.formats import DEFAULT_OUTPUT, check_output, draws_table

    with handled(ctx) as s:
        fmt = check_output(output or DEFAULT_OUTPUT)
        rows = _effective(ctx, s, name)
    if not draws_table(fmt, None):
        _write([{"setting": k, "value": v, "source": src} for k, v, src in rows], fmt)
    else:
        from sbdlq.output.report_tables import plain_table

        plain_table(["setting", "value", "source"], [[k, "-" if v is None else str(v), src] for k, v, src in rows])


def _profile_record(prof: Any, is_default: bool) -> dict[str, Any]:
    """One profile for `config list`: its target kind and a value that is never a secret."""
    from sbdlq.profiles import OPTION_KEYS

    key = prof.target_key
    value = prof.values.get(key) if key else None
    if key == "connection_string":
        from sbdlq.connstr import parse_connection_string

        value = parse_connection_string(str(value)).endpoint
    from sbdlq.connstr import redact

    # A proxy URL's user:password is masked like a key (every string option goes through redact).
    options = {k: redact(v) if isinstance(v, str) else v for k, v in prof.values.items() if k in OPTION_KEYS}
    return {"name": prof.name, "default": is_default, "target": key, "value": value, "options": options}


def _effective(ctx: typer.Context, s: Settings, name: str | None) -> list[tuple[str, Any, str]]:
    """(setting, value, source) rows: config file, profile, target, then option defaults."""
    from sbdlq.connstr import redact
    from sbdlq.output.formats import DEFAULT_OUTPUT
    from sbdlq.profiles import OPTION_KEYS, choose_profile, config_path, resolve_target

    root = ctx.find_root()
    rows: list[tuple[str, Any, str]] = [
        ("config_file", str(config_path()), "env SBDLQ_CONFIG" if os.environ.get("SBDLQ_CONFIG") else "default")
    ]
    if name is None:
        options, profile_name = s.options, s.profile
    else:
        # The profile alone, at the config-file level: options and environment variables don't apply.
        options, profile_name = {"profile": Setting(name, Source.PROFILE)}, name
    choice = choose_profile(options, profile_name)
    prof = choice.profile if choice else None
    unset = _unset_secret_variable(prof)
    try:
        target: Target | None = resolve_target(options=options, profile_name=profile_name, warn=err)
    except BadInput:
        if unset is None:
            raise
        target = None  # the profile's secret is not in the environment: showing it needs no secret

    if choice is None:
        rows.append(("profile", None, "default"))
    elif name is not None:
        rows.append(("profile", choice.name, "argument"))
    elif choice.level is Source.PROFILE and not root.params.get("profile"):
        rows.append(("profile", choice.name, "config default_profile"))
    else:
        rows.append(("profile", choice.name, _given_by(s.options.get("profile", Setting(None)), "profile")))

    if target is None:
        assert prof is not None
        rows.append(("connection_string_env", f"{unset} (not set)", f"profile {prof.name}"))
    else:
        value = redact(target.value) if target.kind == "connection_string" else target.value
        rows.append((target.kind, value, _target_source(target)))

    timeout = s.options.get("timeout", Setting(None))
    if name is None and timeout.source in (Source.OPTION, Source.ENV) and timeout.value:
        rows.append(("timeout", timeout.value, _given_by(timeout, "timeout")))
    elif prof is not None and prof.option("timeout"):
        rows.append(("timeout", prof.option("timeout"), f"profile {prof.name}"))
    else:
        rows.append(("timeout", _param_default(root, "timeout"), "default"))

    if prof is not None and prof.option("output"):
        rows.append(("output", prof.option("output"), f"profile {prof.name}"))
    else:
        rows.append(("output", DEFAULT_OUTPUT, "default"))
    for key in OPTION_KEYS:
        shown_apart = ("output", "timeout", "transport", "proxy", "sdk_shortcuts")
        if key not in shown_apart and prof is not None and prof.option(key) is not None:
            rows.append((key, prof.option(key), f"profile {prof.name}"))
    rows.append(_sdk_row(prof, environment=name is None))
    for key in ("transport", "proxy"):  # the proxy's user:password masked, like a key
        given = s.options.get(key, Setting(None))
        if name is None and given.source in (Source.OPTION, Source.ENV) and given.value:
            rows.append((key, redact(given.value), _given_by(given, key)))
        elif prof is not None and prof.option(key) is not None:
            rows.append((key, redact(str(prof.option(key))), f"profile {prof.name}"))
    return rows


def _sdk_row(prof: Any, *, environment: bool) -> tuple[str, Any, str]:
    """The azure-servicebus release and whether sbdlq takes its private shortcuts, and why: the
    variable (where the environment applies), else the profile's key, else auto."""
    from sbdlq.backends.servicebus.shortcuts import Shortcuts, sdk_version
    from sbdlq.sdk_shortcut_mode import SDK_SHORTCUTS_ENV

    from_env = environment and bool(os.environ.get(SDK_SHORTCUTS_ENV))
    mode = prof.option("sdk_shortcuts") if prof is not None and not from_env else None
    if from_env:
        state, source = Shortcuts.resolve(None).why, f"env {SDK_SHORTCUTS_ENV}"
    elif mode is not None:
        state, source = Shortcuts.resolve(mode).why, f"profile {prof.name}"
    else:
        state, source = Shortcuts.resolve("auto").why, "default"
    return ("sdk", f"azure-servicebus {sdk_version() or 'not installed'}, shortcuts {state}", source)


def _unset_secret_variable(prof: Any) -> str | None:
    """The profile's connection_string_env variable when it is not set in the environment."""
    if prof is None or prof.target_key != "connection_string_env":
        return None
    variable = str(prof.values["connection_string_env"])
    return None if os.environ.get(variable) else variable


def _given_by(setting: Setting, key: str) -> str:
    """`option --profile` or `env SBDLQ_PROFILE`: how a global option reached this command line."""
    if setting.source is Source.ENV:
        return f"env {ENV_VARS[key]}"
    return f"option {flag(key)}"


def _target_source(target: Target) -> str:
    """`option --namespace`, `env SBDLQ_EMULATOR`, `profile prod` or `default`."""
    if target.level in (Source.OPTION, Source.ENV):
        return f"{target.level.value} {target.origin}"
    return target.origin or target.source


def _param_default(root: click.Context, name: str) -> Any:
    """The declared default of a global option (so it is stated once, in cli/main.py)."""
    for param in root.command.params:
        if param.name == name:
            return param.default
    return None


def _write(data: Any, fmt: str) -> None:
    from sbdlq.output.formats import write_document

    write_document(data, fmt)


#: the top-level group of this module, by the name the user types
COMMANDS = {"config": app}


def register(parent: typer.Typer, name: str) -> None:
    """Add the group `name` of `COMMANDS` to `parent`."""
    parent.add_typer(COMMANDS[name], name=name)
