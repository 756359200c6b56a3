"""The root command group: global options anywhere, and usage errors as one line on stderr (exit 2).

The target and diagnostic options are the root's, but an operator used to az types them after
the command (`sbdlq count orders --profile prod`). Before click parses, `lift_global_options`
moves them in front of the command, unless the command declares an option of that name. Shell
completion sees them on every command too (`_with_global_options`), so TAB and parsing agree.
The other way round, az users type the output options first (`sbdlq -o json count`): those
(`LOWERED`) are moved after the command's name, when the command takes them.
"""

from __future__ import annotations

import copy
import re
import sys
from typing import Any

import click
from typer.core import TyperGroup

from sbdlq import interrupts
from sbdlq.errors import ExitStatus

# The root's options that may come after the command (not --version, not --help).
LIFTED = frozenset(
    {"connection_string", "namespace", "emulator", "profile", "timeout", "transport", "proxy", "verbose", "debug"}
)

# The command's output options that may come before it, as in `az -o json ...`: the flags, all taking a value.
LOWERED = ("-o", "--output", "--query")


def _options_by_name(params: list[click.Parameter]) -> dict[str, click.Parameter]:
    return {name: p for p in params if isinstance(p, click.Option) for name in (*p.opts, *p.secondary_opts)}


def _takes_value(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and not param.is_flag and not param.count


def _option_name(token: str) -> str:
    """`--profile` for `--profile=prod`; the token itself otherwise."""
    return token.split("=", 1)[0] if token.startswith("--") else token


def _skip_options(args: list[str], options: dict[str, click.Parameter]) -> int:
    """Index of the first token that is neither one of `options` nor its value."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        param = options.get(_option_name(args[i]))
        i += 2 if param is not None and _takes_value(param) and "=" not in args[i] else 1
    return i


def _resolve(group: click.Group, ctx: click.Context, args: list[str]) -> tuple[click.Command, int]:
    """The command the leading names in args lead to, and how many names that took."""
    cmd: click.Command = group
    n = 0
    while n < len(args) and isinstance(cmd, click.Group) and not args[n].startswith("-"):
        sub = cmd.get_command(ctx, args[n])
        if sub is None:
            break
        cmd, n = sub, n + 1
    return cmd, n


def _lowered_name(token: str) -> str | None:
    """The `LOWERED` option a token names (`-ojson` and `--output=json` too), else None."""
    name = _option_name(token)
    if name in LOWERED:
        return name
    return "-o" if token.startswith("-o") and not token.startswith("--") else None


def _split_lowered(head: list[str]) -> tuple[list[str], list[str]]:
    """head without the `LOWERED` options (and their values), and those options."""
    kept: list[str] = []
    lowered: list[str] = []
    i = 0
    while i < len(head):
        token = head[i]
        name = _lowered_name(token)
        if name is None:
            kept.append(token)
            i += 1
            continue
        # `-o json` and `--query X` are two tokens; `-ojson` and `--output=json` one.
        takes_next = token == name
        lowered.extend(head[i : i + (2 if takes_next else 1)])
        i += 2 if takes_next else 1
    return kept, lowered


def lift_global_options(root: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """args with the root's global options that follow the command moved before it, and the
    command's output options that precede it moved after its name."""
    globals_ = {k: p for k, p in _options_by_name(root.params).items() if p.name in LIFTED}
    before = _options_by_name(root.params)
    valued = click.Option(["--lowered-placeholder"])  # any option taking a value: how far the head goes
    before.update({name: valued for name in LOWERED})
    start = _skip_options(args, before)
    head, rest = args[:start], args[start:]
    cmd, names = _resolve(root, ctx, rest)
    head, lowered = _split_lowered(head)
    if lowered and not any(name in _options_by_name(cmd.params) for name in LOWERED):
        head += lowered  # not the command's: click names the unknown option
        lowered = []
    own = _options_by_name(cmd.params)
    lifted: list[str] = []
    kept = rest[:names]
    i = names
    while i < len(rest):
        token = rest[i]
        if token == "--":
            kept.extend(rest[i:])
            break
        name = _option_name(token)
        # The command's own options (and their values) stay; a same-named option is the command's.
        param = own.get(name) or globals_.get(name)
        into = kept if name in own or param is None else lifted
        into.append(token)
        i += 1
        if param is not None and _takes_value(param) and "=" not in token and i < len(rest):
            into.append(rest[i])
            i += 1
    return head + lifted + kept[:names] + lowered + kept[names:]


def _with_global_options(cmd: click.Command, extra: list[click.Parameter]) -> click.Command:
    """For shell completion: cmd (and, for a group, every command under it) offering extra too."""
    shown = copy.copy(cmd)
    own = _options_by_name(cmd.params)
    shown.params = [*cmd.params, *(p for p in extra if not any(o in own for o in p.opts))]
    if isinstance(cmd, click.Group):
        inner = cmd.get_command

        def get_command(ctx: click.Context, name: str) -> click.Command | None:
            sub = inner(ctx, name)
            return None if sub is None else _with_global_options(sub, extra)

        shown.get_command = get_command  # type: ignore[attr-defined]
    return shown


def _redact(text: str) -> str:
    """connstr.redact, imported when an error is printed: its patterns would cost every start."""
    from sbdlq.connstr import redact

    return redact(text)


class _Interrupted(BaseException):
    """A Ctrl-C on its way past click (which would print an empty line for a KeyboardInterrupt)."""


class SbdlqGroup(TyperGroup):
    """Runs the app without click's standalone error printing, and prints one line instead."""

    def _suggesting(self, exc: click.UsageError) -> str:
        """exc's message with one "Did you mean" for a misspelt command or option, global ones too."""
        message = exc.format_message()
        # click and Typer both add the nearest command: say it once.
        message = re.sub(r"(Did you mean [^?]*\?)(?: \1)+", r"\1", message)
        if isinstance(exc, click.NoSuchOption):
            # The command's options and the global ones that may follow it: the nearest of all.
            names = [name for p in self.params if p.name in LIFTED for name in p.opts if name.startswith("--")]
            from sbdlq.nearest import closest  # here: only a misspelt option needs it

            near = closest(exc.option_name, [*(exc.possibilities or []), *names], n=1)
            if near:
                message = f"No such option {exc.option_name!r}. Did you mean {near[0]!r}?"
        return message

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, lift_global_options(self, ctx, args))

    # click answers a Ctrl-C with an empty line and Abort; it is ours to say in one line.
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise _Interrupted from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted from None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None:
            return None
        if ctx.resilient_parsing:
            # Completing: the global options are offered after the command, as they are parsed.
            return _with_global_options(cmd, [p for p in self.params if p.name in LIFTED])
        return cmd

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **kwargs: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **kwargs)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            # A bare `sbdlq` (or a bare group) asks what there is: its help once, on stdout, exit 0,
            # as gh does. Building the error rendered the help already (Typer's Rich help prints as
            # it renders and hands back ""); a plain-text help comes back as the message instead.
            shown = exc.format_message()
            if shown:
                click.echo(shown)
            sys.exit(int(ExitStatus.OK))
        except click.UsageError as exc:
            hint = ""
            if exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            # A connection string typed where a command or value belongs lands in the message.
            sys.stderr.write(_redact(f"sbdlq: {self._suggesting(exc)}{hint}") + "\n")
            sys.exit(int(ExitStatus.USAGE))
        except click.ClickException as exc:
            sys.stderr.write(_redact(f"sbdlq: {exc.format_message()}") + "\n")
            sys.exit(exc.exit_code)
        except (click.Abort, _Interrupted):
            sys.stderr.write(f"sbdlq: {interrupts.line()}\n")
            sys.exit(int(ExitStatus.INTERRUPTED))
        sys.exit(rv if isinstance(rv, int) else 0)
