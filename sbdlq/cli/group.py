"""The root command group: global options anywhere, and usage errors as one line on stderr (exit 2).

The target and diagnostic options are the root's, but an operator used to az types them after
the command (`sbdlq count orders --profile prod`). Before click parses, `lift_global_options`
moves them in front of the command, unless the command declares an option of that name. Shell
completion sees them on every command too (`_with_global_options`), so TAB and parsing agree.
"""

from __future__ import annotations

import copy
import difflib
import re
import sys
from typing import Any

import click
from typer.core import TyperGroup

from sbdlq.connstr import redact
from sbdlq.errors import ExitStatus

# The root's options that may come after the command (not --version, not --help).
LIFTED = frozenset(
    {"connection_string", "namespace", "emulator", "profile", "timeout", "transport", "proxy", "verbose", "debug"}
)


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


def lift_global_options(root: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """args with the root's global options that follow the command moved before it."""
    globals_ = {k: p for k, p in _options_by_name(root.params).items() if p.name in LIFTED}
    start = _skip_options(args, _options_by_name(root.params))
    head, rest = args[:start], args[start:]
    cmd, names = _resolve(root, ctx, rest)
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
    return head + lifted + kept


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
            near = difflib.get_close_matches(exc.option_name, [*(exc.possibilities or []), *names], n=1)
            if near:
                message = f"No such option {exc.option_name!r}. Did you mean {near[0]!r}?"
        return message

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, lift_global_options(self, ctx, args))

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
            click.echo(exc.ctx.get_help() if exc.ctx else str(exc), err=True)
            sys.exit(int(ExitStatus.USAGE))
        except click.UsageError as exc:
            hint = ""
            if exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            # A connection string typed where a command or value belongs lands in the message.
            sys.stderr.write(redact(f"sbdlq: {self._suggesting(exc)}{hint}") + "\n")
            sys.exit(int(ExitStatus.USAGE))
        except click.ClickException as exc:
            sys.stderr.write(redact(f"sbdlq: {exc.format_message()}") + "\n")
            sys.exit(exc.exit_code)
        except click.Abort:
            sys.stderr.write("sbdlq: interrupted\n")
            sys.exit(int(ExitStatus.INTERRUPTED))
        sys.exit(rv if isinstance(rv, int) else 0)
