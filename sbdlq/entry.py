"""The console script's entry point: the CLI imported and run under a Ctrl-C guard.

Importing the CLI takes a noticeable moment on a slow or busy machine; a Ctrl-C in it, or
while Typer builds the command, would otherwise end in a Python traceback. Nothing is
imported here before the guard but sys and `sbdlq.interrupts` (which says what a Ctrl-C
means when it lands, and keeps a finished run's status).
"""

import sys


def main() -> None:
    """Run `sbdlq`; a Ctrl-C before a command's own handling starts is one line and 130."""
    from sbdlq import interrupts

    interrupts.arm()
    try:
        from sbdlq.cli.main import run

        run()
    except KeyboardInterrupt:
        from sbdlq.errors import ExitStatus

        sys.stderr.write(f"sbdlq: {interrupts.line()}\n")
        raise SystemExit(int(ExitStatus.INTERRUPTED)) from None
