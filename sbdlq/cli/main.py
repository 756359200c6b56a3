"""The `sbdlq` command: global options, then the DLQ, transfer-dlq, emulator and config commands."""

import os
import sys
from typing import Annotated, Any

import typer

from sbdlq import __version__
from sbdlq.addresses import SubQueue
from sbdlq.cli.common import Settings, given_setting
from sbdlq.cli.completion import complete_profile
from sbdlq.cli.group import LOWERED, SbdlqGroup
from sbdlq.profiles import ENV_VARS, flag

TARGET = "Target"
DIAG = "Diagnostics"
# The global options that become Settings (value and where it came from).
GLOBAL_SETTINGS = ("connection_string", "namespace", "emulator", "timeout", "profile", "transport", "proxy")

app = typer.Typer(
    cls=SbdlqGroup,
    name="sbdlq",
    help="Operate Azure Service Bus dead-letter queues: count, peek, inspect, resubmit, purge.",
    epilog="Target and diagnostic options may also follow the command (sbdlq count orders --profile prod); "
    "-o and --query may come before it (sbdlq -o json count).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        from sbdlq.backends.servicebus.shortcuts import describe

        typer.echo(f"sbdlq {__version__}")
        typer.echo(describe())
        raise typer.Exit(0)


def _target_option(key: str, help: str, **extra: Any) -> Any:
    """A global target option: its flag and its environment variable both come from the setting key."""
    return typer.Option(flag(key), envvar=ENV_VARS[key], help=help, rich_help_panel=TARGET, **extra)


@app.callback()
def main(
    ctx: typer.Context,
    connection_string: Annotated[
        str | None,
        _target_option(
            "connection_string", "SAS connection string (also UseDevelopmentEmulator=true ones).", show_default=False
        ),
    ] = None,
    namespace: Annotated[
        str | None, _target_option("namespace", "NAME.servicebus.windows.net, signed in with DefaultAzureCredential.")
    ] = None,
    emulator: Annotated[
        str | None, _target_option("emulator", "The local emulator store (default: the user data dir).")
    ] = None,
    profile: Annotated[
        str | None, _target_option("profile", "A profile from the config file.", autocompletion=complete_profile)
    ] = None,
    timeout: Annotated[str, _target_option("timeout", "Give up on an unreachable broker after this long.")] = "30s",
    transport: Annotated[
        str | None,
        _target_option(
            "transport", "amqp (port 5671) or websockets (443, proxies).", show_default=False, metavar="amqp|websockets"
        ),
    ] = None,
    proxy: Annotated[
        str | None,
        typer.Option(
            "--proxy",
            envvar=["HTTPS_PROXY", "https_proxy"],
            help="HTTP proxy URL for websockets and the admin client (user:password masked).",
            rich_help_panel=TARGET,
            show_default=False,
            metavar="URL",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More on stderr.", rich_help_panel=DIAG)] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Tracebacks on errors (secrets still masked).", rich_help_panel=DIAG)
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Operate Azure Service Bus dead-letter queues: count, peek, inspect, resubmit, purge."""
    options = {name: given_setting(ctx, name) for name in GLOBAL_SETTINGS}
    ctx.obj = Settings(options=options, profile=profile, timeout=timeout, verbose=verbose, debug=debug)


def register_dlq_commands(group: typer.Typer, sub_queue: SubQueue) -> None:
    """Define the five DLQ commands on `group`, reading `sub_queue` (dlq.py's four and copy_cmds.py's resubmit)."""
    from sbdlq.cli.copy_cmds import resubmit
    from sbdlq.cli.dlq import count, fail_above_option, inspect_reason, peek, purge
    from sbdlq.cli.options import for_sub_queue

    group.command("count")(for_sub_queue(count, sub_queue, options={"fail_above": fail_above_option(sub_queue)}))
    group.command("peek")(for_sub_queue(peek, sub_queue))
    group.command("inspect-reason")(for_sub_queue(inspect_reason, sub_queue))
    group.command("resubmit")(for_sub_queue(resubmit, sub_queue))
    group.command("purge")(for_sub_queue(purge, sub_queue))


def _build() -> None:
    from sbdlq.cli import helpfmt

    helpfmt.install()

    register_dlq_commands(app, SubQueue.DEAD_LETTER)
    transfer = typer.Typer(
        name="transfer-dlq",
        help="The same commands on the transfer dead-letter queue (forwarding failures).",
        no_args_is_help=True,
    )
    register_dlq_commands(transfer, SubQueue.TRANSFER_DEAD_LETTER)
    app.add_typer(transfer, name="transfer-dlq")
    from sbdlq.cli.copy_cmds import replay

    app.command("replay")(replay)
    from sbdlq.cli.apply_cmd import apply

    app.command("apply")(apply)
    from sbdlq.cli.config_cmds import app as config_app
    from sbdlq.cli.emulator_cmds import app as emulator_app
    from sbdlq.cli.emulator_entities import register as register_entity_commands

    register_entity_commands(emulator_app)

    app.add_typer(emulator_app, name="emulator")

    app.add_typer(config_app, name="config")
    from sbdlq.cli.routing_cmds import app as routing_app

    app.add_typer(routing_app, name="routing")
    from sbdlq.cli.spread_cmds import app as spread_app

    app.add_typer(spread_app, name="spread")
    from sbdlq.ui.command import ui

    app.command("ui")(ui)
    from sbdlq.cli.examples import attach

    attach(app)


_build()


# Options before the command that take a value (every global setting does, and the output
# options az users type first); the rest are flags.
_VALUED = frozenset([*(flag(key) for key in GLOBAL_SETTINGS), *LOWERED])


def asked_command(args: list[str]) -> str | None:
    """The command a command line names first, after the root's own options (None: none)."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 2 if args[i] in _VALUED else 1  # `--profile=prod` is one token and not in _VALUED
    return args[i] if i < len(args) else None


def keep_only(name: str | None) -> None:
    """Leave `name` the one command Typer turns into a click command, when it is one of ours.

    Typer converts every registered command on each start (~15 ms for the 26 of them: it reads
    each signature's annotations); a call runs one. The root's help, completion and an
    unknown name (which gets the nearest one suggested) keep them all.
    """
    if name is None or "_SBDLQ_COMPLETE" in os.environ:
        return
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if commands or groups:
        app.registered_commands, app.registered_groups = commands, groups


def run() -> None:
    """Console-script entry point."""
    refuse_undecodable(sys.argv[1:])
    keep_only(asked_command(sys.argv[1:]))
    app()


def refuse_undecodable(args: list[str]) -> None:
    """One line and exit 2 for an argument that is not UTF-8 (Python hands its bytes on as lone
    surrogates, which fail deep inside a command as "unexpected error")."""
    for n, arg in enumerate(args, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            typer.echo(f"sbdlq: argument {n} ({shown[:40]}) is not valid UTF-8 text", err=True)
            raise SystemExit(2) from None
