"""The root command group: usage errors become one line on stderr with exit status 2."""

from __future__ import annotations

import sys
from typing import Any

import click
from typer.core import TyperGroup

from sbdlq.connstr import redact
from sbdlq.errors import ExitStatus


class SbdlqGroup(TyperGroup):
    """Runs the app without click's standalone error printing, and prints one line instead."""

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
            sys.stderr.write(redact(f"sbdlq: {exc.format_message()}{hint}") + "\n")
            sys.exit(int(ExitStatus.USAGE))
        except click.ClickException as exc:
            sys.stderr.write(redact(f"sbdlq: {exc.format_message()}") + "\n")
            sys.exit(exc.exit_code)
        except click.Abort:
            sys.stderr.write("sbdlq: interrupted\n")
            sys.exit(int(ExitStatus.INTERRUPTED))
        sys.exit(rv if isinstance(rv, int) else 0)
