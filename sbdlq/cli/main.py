"""The `sbdlq` command: global options, then every command and group of `COMMANDS`, built when asked."""

import os
import sys
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import typer

from sbdlq import __version__
from sbdlq.addresses import SubQueue
from sbdlq.cli.completion import complete_profile
from sbdlq.cli.group import LOWERED, SbdlqGroup
from sbdlq.cli.settings import Settings, given_setting
from sbdlq.profiles import ENV_VARS, flag

TARGET = "Target"
DIAG = "Diagnostics"
# The global options that become Settings (value and where it came from).
GLOBAL_SETTINGS = ("connection_string", "namespace", "emulator", "timeout", "profile", "transport", "proxy")


class _BuiltWhenRead(typer.Typer):
    """The app, its commands registered when first read (every one), unless `run` built the one it runs."""

    built = False

    @property  # type: ignore[override]
    def registered_commands(self) -> Any:
        build()
        return self._commands

    @registered_commands.setter
    def registered_commands(self, value: Any) -> None:
        self._commands = value

    @property  # type: ignore[override]
    def registered_groups(self) -> Any:
        build()
        return self._groups

    @registered_groups.setter
    def registered_groups(self, value: Any) -> None:
        self._groups = value


app = _BuiltWhenRead(
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


@dataclass(frozen=True)
class Command:
    """A top-level command or group: its line in the root's help and the command modules that add it."""

    name: str
    #: its line in the root's help, so that `sbdlq --help` imports no command module: the
    #: command's docstring summary (a group's Typer help) word for word, which the whole app
    #: shows instead (tests/cli/test_command_modules.py says which, by name, when they differ)
    help: str
    #: the modules of sbdlq/cli/commands whose `register(parent, name)` add it, in order: the
    #: first declares it in its `COMMANDS`, the others are parts of its group
    #: (none: `transfer-dlq`, the DLQ commands bound a second time, by `register_dlq_commands`)
    modules: tuple[str, ...] = ()
    group: bool = False
    #: a DLQ command: also bound to the transfer DLQ, under `transfer-dlq`
    dlq: bool = False


#: every top-level command and group, in help order: the one list the lazy start (`BUILDERS`),
#: the root's help (`COMMAND_HELP`) and the transfer DLQ's commands are read from
COMMANDS = (
    Command("count", "Count active, dead-letter, transfer dead-letter and scheduled messages.", ("dlq",), dlq=True),
    Command("peek", "Browse the queue without locking or changing anything.", ("dlq",), dlq=True),
    Command(
        "inspect-reason",
        "Group messages by why they failed: count, first and last enqueued, samples.",
        ("dlq",),
        dlq=True,
    ),
    Command(
        "resubmit",
        "Send copies of DLQ messages back (send first, then complete the original).",
        ("copies",),
        dlq=True,
    ),
    Command("purge", "Delete DLQ messages, optionally exporting each one first.", ("dlq",), dlq=True),
    Command(
        "replay",
        "Send the records of an export or peek file to a queue or topic (every line checked first).",
        ("copies",),
    ),
    Command("apply", "Run a policy file's rules (resubmit, purge, alert) in order, e.g. from cron.", ("apply",)),
    Command("ui", "Browse and fix dead-letter queues in a terminal console (needs the ui extra).", ("ui",)),
    Command("transfer-dlq", "The same commands on the transfer dead-letter queue (forwarding failures).", group=True),
    Command(
        "emulator",
        "The local emulator: init, list, send, receive, demo, reset, serve, ca.",
        ("emulator", "emulator_entities"),
        group=True,
    ),
    Command(
        "config",
        "Profiles: where the config file is, what it holds, and which settings apply.",
        ("config",),
        group=True,
    ),
    Command(
        "routing",
        "Targeted routing: let a resubmit reach one subscription of a topic (sbdlq-target).",
        ("routing",),
        group=True,
    ),
    Command(
        "spread",
        "Spreads started by resubmit --spread: list them, see where their copies are, cancel the rest.",
        ("spread",),
        group=True,
    ),
)
#: the five DLQ commands (commands/dlq.py's four, commands/copies.py's resubmit)
DLQ_COMMANDS = tuple(command.name for command in COMMANDS if command.dlq)


def register_command(command: Command, parent: typer.Typer, sub_queue: SubQueue | None = None) -> None:
    """Add `command` to `parent`: each of its modules' `register(parent, name)`, a DLQ command
    reading `sub_queue` when one is given; `transfer-dlq` is the DLQ commands bound again."""
    if not command.modules:
        register_dlq_commands(parent, command.name, SubQueue.TRANSFER_DEAD_LETTER)
        return
    for module in command.modules:
        # __import__, as an import statement: `python -X importtime` (the start-up tests and
        # benchmarks/startup.py) does not see a module importlib.import_module loads
        register = __import__(f"sbdlq.cli.commands.{module}", fromlist=["register"]).register
        if sub_queue is None:
            register(parent, command.name)
        else:
            register(parent, command.name, sub_queue=sub_queue)


def register_dlq_commands(parent: typer.Typer, name: str, sub_queue: SubQueue) -> None:
    """The group `name` on `parent`: the five DLQ commands, reading `sub_queue`."""
    group = typer.Typer(name=name, help=COMMAND_HELP[name], no_args_is_help=True)
    for command in COMMANDS:
        if command.dlq:
            register_command(command, group, sub_queue)
    parent.add_typer(group, name=name)


#: every top-level command, in help order, and what registers it (a start builds the one it runs)
BUILDERS: dict[str, Any] = {command.name: partial(register_command, command, app) for command in COMMANDS}
#: each command's line in the root's help
COMMAND_HELP = {command.name: command.help for command in COMMANDS}
_GROUPS = frozenset(command.name for command in COMMANDS if command.group)


def _listed() -> None:
    """A command's place in the root's help (never run: a start that runs one builds it)."""


def build_index() -> None:
    """The root's help: every command by name and line, and the root's examples, none of their modules imported."""
    app.built = True
    from sbdlq.cli import helpfmt
    from sbdlq.cli.examples import attach

    helpfmt.install()
    for name, line in COMMAND_HELP.items():
        if name in _GROUPS:
            app.add_typer(typer.Typer(name=name, help=line), name=name)
        else:
            app.command(name, help=line)(_listed)
    attach(app)  # the root's examples end its help, as the whole app's do


def build(only: str | None = None) -> None:
    """Register every command (or only the one named) on the app, once, with its examples."""
    if app.built:
        return
    app.built = True
    from sbdlq.cli import helpfmt
    from sbdlq.cli.examples import attach

    helpfmt.install()
    for name, register in BUILDERS.items():
        if only is None or name == only:
            register()
    attach(app)


# Options before the command that take a value (every global setting does, and the output
# options az users type first); the rest are flags.
_VALUED = frozenset([*(flag(key) for key in GLOBAL_SETTINGS), *LOWERED])


def asked_command(args: list[str]) -> str | None:
    """The command a command line names first, after the root's own options (None: none)."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 2 if args[i] in _VALUED else 1  # `--profile=prod` is one token and not in _VALUED
    return args[i] if i < len(args) else None


def run() -> None:
    """Console-script entry point: only the command the line names is imported and converted
    (Typer reads every registered signature on each start); the root's help, completion and an
    unknown name (which gets the nearest one suggested) build them all."""
    refuse_undecodable(sys.argv[1:])
    args = sys.argv[1:]
    name = asked_command(args)
    completing = "_SBDLQ_COMPLETE" in os.environ
    if name is None and not completing and ("--help" in args or "-h" in args):
        build_index()
    build(name if name in BUILDERS and not completing else None)
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
