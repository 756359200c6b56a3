"""The real `sbdlq` in a real terminal: tmux runs it in a pseudo-terminal, keys go in, the screen comes out.

For the console (`sbdlq ui`): a test presses keys as a person would (`press`, `type`) and
reads the screen (`screen`, `wait_for`). Each Terminal has its own tmux server on its own
socket, so no test sees the user's tmux or another test's. Waits poll the screen until the
text shows, with a generous deadline: a loaded machine is slow, never wrong.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.cli import isolated_env

#: How long a wait polls the screen before the test fails (a bound, not a speed claim).
DEADLINE_S = 30.0
#: The line the shell prints when sbdlq ends, with its exit status.
EXITED = "[sbdlq exited "

TMUX_MISSING = "tmux is not installed (apt-get install tmux): the terminal tests drive sbdlq through it"


def have_tmux() -> bool:
    return shutil.which("tmux") is not None


def terminal_env(home: Path) -> dict[str, str]:
    """This process's environment (PATH, PYTHONPATH) made isolated as the CLI runner's, but with
    no fixed size: the terminal's own size is what the console reads."""
    env = dict(os.environ)
    for name, value in isolated_env(home).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    for name in ("COLUMNS", "LINES", "TMUX", "TMUX_PANE"):
        env.pop(name, None)
    return env


class Terminal:
    """`python -m sbdlq ARGS` in a tmux pane of `size` (columns, lines), in `terminal_env(home)`."""

    def __init__(self, argv: list[str], home: Path, size: tuple[int, int] = (80, 24)) -> None:
        # A short directory of its own: a unix socket path must stay under ~100 characters.
        self.dir = Path(tempfile.mkdtemp(prefix="sbdlq-tmux-"))
        self.socket = self.dir / "s"
        self.env = terminal_env(home)
        # After sbdlq ends, the shell says how, and the pane stays so the test can read it.
        script = f'"$@"; echo "{EXITED}$?]"; sleep 3600'
        cols, lines = size
        self._tmux(
            "new-session", "-d", "-s", "t", "-x", str(cols), "-y", str(lines),
            "sh", "-c", script, "sh", sys.executable, "-m", "sbdlq", *argv,
        )  # fmt: skip

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", str(self.socket), "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert done.returncode == 0, f"tmux {args[0]}: {done.stderr}"
        return done.stdout

    def screen(self) -> str:
        """What the terminal shows now, line by line."""
        return self._tmux("capture-pane", "-p", "-t", "t")

    def press(self, *keys: str) -> None:
        """Keys by tmux's names: `q`, `Enter`, `Escape`, `C-q`, `/`."""
        self._tmux("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        """Text typed as it is (no key names)."""
        self._tmux("send-keys", "-t", "t", "-l", text)

    def wait_for(self, *texts: str, gone: tuple[str, ...] = ()) -> str:
        """Poll until every one of `texts` shows and none of `gone` does; the screen then."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            shown = self.screen()
            if all(t in shown for t in texts) and not any(t in shown for t in gone):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {DEADLINE_S:g}s for {texts} (and no {gone}); the screen:\n{shown}")
            time.sleep(0.1)

    def wait_for_any(self, *texts: str) -> str:
        """Poll until one of `texts` shows; which one."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            shown = self.screen()
            for t in texts:
                if t in shown:
                    return t
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {DEADLINE_S:g}s for any of {texts}; the screen:\n{shown}")
            time.sleep(0.1)

    def exit_status(self) -> int:
        """Wait for sbdlq to end; its exit status."""
        shown = self.wait_for(EXITED)
        return int(shown.split(EXITED, 1)[1].split("]", 1)[0])

    def close(self) -> None:
        """Stop this terminal's tmux server (and sbdlq with it)."""
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, timeout=DEADLINE_S)
        shutil.rmtree(self.dir, ignore_errors=True)
