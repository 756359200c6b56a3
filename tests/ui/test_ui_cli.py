"""`sbdlq ui` as a command: lazy Textual, the missing-extra line, target errors on the one path."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import Cli

from sbdlq.cli.commands.ui import INSTALL_HINT


def test_help_does_not_import_textual() -> None:
    code = (
        "import sys; sys.argv = ['sbdlq', '--help']\n"
        "from sbdlq.cli.main import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "assert not any(m.startswith('textual') for m in sys.modules), 'textual imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]


def test_without_the_extra_one_line_and_exit_1(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "textual", None)
    code, _out, err = cli("ui")
    assert code == 1
    assert err == INSTALL_HINT + "\n"
    assert "pip install 'sbdlq[ui]'" in err


def test_missing_store_is_the_usual_error(cli: Cli) -> None:
    pytest.importorskip("textual", reason="the ui extra is not installed")
    code, _, err = cli("ui")
    assert code == 2
    assert err.startswith("sbdlq: no emulator store at") and "Traceback" not in err


def test_bad_refresh_is_refused(cli: Cli) -> None:
    pytest.importorskip("textual", reason="the ui extra is not installed")
    code, _, err = cli("ui", "--refresh", "0s")
    assert code == 2 and "--refresh" in err
