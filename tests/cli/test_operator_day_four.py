"""The operator's day, round four (issue 38): what a new user tripped on. Exact CLI output and
exit statuses, as a user or a script sees them."""

from __future__ import annotations

from typing import Any

import pytest

# ------------------------------------------------------------------ a bare command: its help once


@pytest.mark.parametrize("words", [(), ("emulator",), ("routing",), ("transfer-dlq",), ("config",)])
def test_a_bare_command_prints_its_help_once_and_exits_0(cli: Any, words: tuple[str, ...]) -> None:
    code, out, err = cli.bare(*words)
    usage = " ".join(("Usage: sbdlq", *words))
    assert (code, err) == (0, "")
    assert out.count(usage) == 1, out
    assert out.count("--help") == 1  # the options panel once, not the whole page twice
