"""The operator's day, round four (issue 38): what a new user tripped on. Exact CLI output and
exit statuses, as a user or a script sees them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sbdlq import terminal

# ------------------------------------------------------------------ a bare command: its help once


@pytest.mark.parametrize("words", [(), ("emulator",), ("routing",), ("transfer-dlq",), ("config",)])
def test_a_bare_command_prints_its_help_once_and_exits_0(cli: Any, words: tuple[str, ...]) -> None:
    code, out, err = cli.bare(*words)
    usage = " ".join(("Usage: sbdlq", *words))
    assert (code, err) == (0, "")
    assert out.count(usage) == 1, out
    assert out.count("--help") == 1  # the options panel once, not the whole page twice


# ------------------------------------------------------------ "no" at a confirmation: one status

PURGE_POLICY = "rules:\n  - name: drop declined\n    entities: [orders]\n    reason: PaymentDeclined\n    purge: {}\n"
#: every command that asks before it changes something, and the line its "no" prints
ASKING = {
    "purge": (("purge", "orders"), "sbdlq: purge cancelled; nothing was deleted"),
    "apply": (("apply", "{policy}"), "sbdlq: apply cancelled; nothing was changed"),
    "routing enable-targeted": (("routing", "enable-targeted", "events"), "sbdlq: cancelled; nothing was changed"),
    "emulator reset": (("emulator", "reset"), "sbdlq: reset cancelled; nothing was deleted"),
    "emulator delete": (("emulator", "delete", "orders"), "sbdlq: delete cancelled; nothing was deleted"),
}


@pytest.mark.parametrize("name", ASKING)
def test_no_at_a_confirmation_exits_1_in_every_command_and_changes_nothing(
    cli: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    assert cli("emulator", "demo").exit_code == 0
    policy = tmp_path / "policy.yaml"
    policy.write_text(PURGE_POLICY)
    monkeypatch.setattr(terminal, "env", terminal.Environment(stdin_is_terminal=True))
    before = cli("emulator", "list", "-o", "json").json()
    rules = cli("routing", "status", "events", "-o", "json").json()
    words, said = ASKING[name]
    code, _, err = cli(*(w.format(policy=policy) for w in words), input="n\n")
    assert (code, err.splitlines()[-1]) == (1, said)
    assert cli("emulator", "list", "-o", "json").json() == before
    assert cli("routing", "status", "events", "-o", "json").json() == rules


# ------------------------------------------------------- a misspelt policy key: a suggestion at every level

MISSPELT = {
    "an action's option": (
        "rules:\n  - name: retry\n    entities: [orders]\n    resubmit: {max_attempt: 3}\n",
        "4:16: unknown key 'max_attempt' in resubmit (did you mean 'max_attempts'?)",
    ),
    "an alert's option": (
        "rules:\n  - name: page\n    entities: [orders]\n    alert:\n      abve: 10\n",
        "5:7: unknown key 'abve' in alert (did you mean 'above'?)",
    ),
    "a rule's key": (
        "rules:\n  - name: r\n    entitys: [orders]\n    purge: {}\n",
        "3:5: unknown key 'entitys' in a rule (did you mean 'entities'?)",
    ),
    "a top key": (
        "rules:\n  - {name: r, entities: [orders], purge: {}}\nstop_on_eror: true\n",
        "3:1: unknown key 'stop_on_eror' at the top (did you mean 'stop_on_error'?)",
    ),
}


@pytest.mark.parametrize("level", MISSPELT)
def test_a_misspelt_policy_key_gets_a_suggestion_at_every_level(cli: Any, tmp_path: Any, level: str) -> None:
    text, said = MISSPELT[level]
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    assert cli("apply", str(policy), "--explain") == (2, "", f"sbdlq: {policy}:{said}\n")


# ----------------------------------------------------------------- what the demo says of itself


def test_the_demo_help_names_the_default_the_demo_seeds(cli: Any) -> None:
    from sbdlq.emulator.demo import DEFAULT_MESSAGES

    code, out, _ = cli("emulator", "demo", "--help")
    assert code == 0 and f"[default: {DEFAULT_MESSAGES}]" in re.sub(r"[│\s]+", " ", out)
