"""The console script's entry point: the CLI imported and run under a Ctrl-C guard.

Importing the CLI takes a noticeable moment on a slow or busy machine; a Ctrl-C in it, or
while Typer builds the command, would otherwise end in a Python traceback. Nothing is
imported here before the guard but sys.
"""

import sys


def main() -> None:
    """Run `sbdlq`; a Ctrl-C before a command's own handling starts is one line and 130."""
    try:
        from sbdlq.cli.main import run

        run()
    except KeyboardInterrupt:
        from sbdlq.errors import ExitStatus

        sys.stderr.write("sbdlq: interrupted\n")
        raise SystemExit(int(ExitStatus.INTERRUPTED)) from None
