"""The user state dir: where sbdlq keeps what outlives one run (the port records of running
`emulator serve`s, `serve --tls`'s certificates, `apply`'s policy locks). One owner, so
SBDLQ_STATE_DIR moves all of it at once."""

from __future__ import annotations

import os
from pathlib import Path

#: Points the state dir elsewhere (tests, containers, an operator's choice).
STATE_DIR_ENV = "SBDLQ_STATE_DIR"


def state_dir(*parts: str) -> Path:
    """The state dir (SBDLQ_STATE_DIR, else the platform's user state dir), or a folder in it."""
    given = os.environ.get(STATE_DIR_ENV)
    if given:
        return Path(given).expanduser().joinpath(*parts)
    from platformdirs import user_state_dir

    return Path(user_state_dir("sbdlq", appauthor=False)).joinpath(*parts)
