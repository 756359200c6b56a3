"""Malformed policy files, each with where its one error line must point (LINE:COL) and what it says.

Shared by the loader's unit test and the CLI test that runs `sbdlq apply` on each of them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple


class Bad(NamedTuple):
    id: str
    text: str | bytes
    at: str  # LINE:COL
    says: str


def _rule(*lines: str) -> str:
    """A policy of one rule: `name: r` and `entities: [q]` on lines 2 and 3, then `lines` from line 4."""
    return "rules:\n  - name: r\n    entities: [q]\n" + "".join(f"    {line}\n" for line in lines)


BILLION_LAUGHS = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "rules: [*c]\n"
)

BAD_POLICIES = [
    Bad("unknown key in a rule", _rule("reasn: Timeout", "purge: {}"), "4:5", "unknown key 'reasn'"),
    Bad(
        "unknown key at the top",
        "rules:\n  - {name: r, entities: [q], purge: {}}\nretries: 3\n",
        "3:1",
        "unknown key 'retries'",
    ),
    Bad("entities not a list", "rules:\n  - name: r\n    entities: orders\n    purge: {}\n", "3:15", "entities"),
    Bad("max_attempts not a number", _rule("resubmit: {max_attempts: three}"), "4:30", "whole number"),
    Bad("max_attempts zero", _rule("resubmit: {max_attempts: 0}"), "4:30", "at least 1"),
    Bad(
        "bad glob, bracket not closed",
        'rules:\n  - name: r\n    entities: ["orders["]\n    purge: {}\n',
        "3:16",
        "not closed",
    ),
    Bad(
        "glob naming a sub-queue",
        "rules:\n  - name: r\n    entities: [q/$DeadLetterQueue]\n    purge: {}\n",
        "3:16",
        "sub-queue",
    ),
    Bad(
        "purge with resubmit's option", _rule("purge: {max_attempts: 3}"), "4:13", "an option of resubmit, not of purge"
    ),
    Bad(
        "alert with purge's option",
        _rule("alert: {above: 5, export: /tmp}"),
        "4:23",
        "an option of resubmit and purge, not of alert",
    ),
    Bad("resubmit with alert's option", _rule("resubmit: {above: 5}"), "4:16", "an option of alert, not of resubmit"),
    Bad("two actions", _rule("purge: {}", "alert: {above: 1}"), "5:5", "one action"),
    Bad("no action", _rule("reason: X"), "2:5", "no action"),
    Bad("a duration like 7 days", _rule("older_than: 7 days", "purge: {}"), "4:17", "invalid older_than '7 days'"),
    Bad("anchors that loop", "rules: &a\n  - *a\n", "2:5", "aliases are not allowed"),
    Bad("an alias bomb", BILLION_LAUGHS, "2:8", "aliases are not allowed"),
    Bad("a file of 50 MB", "", "1:1", "at most 1048576 bytes"),  # the test makes it 50 MB
    Bad("a key given twice", _rule("reason: A", "reason: B", "purge: {}"), "5:5", "given twice"),
    Bad("a rule without a name", "rules:\n  - entities: [q]\n    purge: {}\n", "2:5", "needs `name`"),
    Bad(
        "two rules of one name",
        "rules:\n  - {name: r, entities: [q], purge: {}}\n  - {name: r, entities: [q], purge: {}}\n",
        "3:5",
        "another rule has this name",
    ),
    Bad("then: purge without export", _rule("resubmit: {max_attempts: 2, then: purge}"), "4:15", "needs `export`"),
    Bad(
        "then: a word it does not know", _rule("resubmit: {max_attempts: 2, then: drop}"), "4:39", "one of keep, purge"
    ),
    Bad("no rules", "rules: []\n", "1:8", "at least one rule"),
    Bad("not YAML", "rules:\n  - name: [r\n", "3:1", "not valid YAML"),
    Bad("a bad --where", _rule('where: "sys.Nope = 1"', "purge: {}"), "4:12", "sys.Nope"),
    Bad("a bad body_regex", _rule('body_regex: "("', "purge: {}"), "4:17", "invalid --body-regex"),
    Bad("a bad set_ttl", _rule("resubmit: {set_ttl: forever}"), "4:15", "--set-ttl"),
    Bad("alert above below zero", _rule("alert: {above: -1}"), "4:20", "at least 0"),
    Bad(
        "stop_on_error not a boolean",
        "stop_on_error: maybe\nrules:\n  - {name: r, entities: [q], purge: {}}\n",
        "1:16",
        "true or false",
    ),
    Bad("rate zero", _rule("resubmit: {rate: 0}"), "4:22", "more than 0"),
    Bad(
        "setting the origin property",
        _rule("resubmit: {set_property: [sbdlq-resubmitted-from=x]}"),
        "4:15",
        "sbdlq-resubmitted-from",
    ),
    Bad(
        "nested too deep",
        "rules:\n  - name: r\n    entities: [q]\n    reason: " + "[" * 20 + "x" + "]" * 20 + "\n",
        "4:26",
        "nested more than",
    ),
    Bad("not UTF-8", b"rules:\n  - name: \xff\n", "2:11", "not UTF-8"),
    Bad("reason as a mapping", _rule("reason: {a: b}", "purge: {}"), "4:13", "not a mapping"),
    Bad("rules not a list", "rules: everything\n", "1:8", "a list of at least one rule"),
    Bad("an empty file", "", "1:1", "one YAML document"),
    Bad("a bad sequence range", _rule("sequence: 9-3", "purge: {}"), "4:15", "--sequence"),
    Bad("then without max_attempts", _rule("resubmit: {then: keep}"), "4:15", "give max_attempts"),
    Bad("an empty name", "rules:\n  - name: ''\n    entities: [q]\n    purge: {}\n", "2:11", "an empty name"),
    Bad(
        "a YAML tag that builds objects",
        _rule("reason: !!python/object:os.system x", "purge: {}"),
        "4:13",
        "not valid YAML",
    ),
    Bad("two documents", "rules: [{name: r, entities: [q], purge: {}}]\n---\nrules: []\n", "3:1", "one YAML document"),
    Bad("entities empty", "rules:\n  - name: r\n    entities: []\n    purge: {}\n", "3:15", "entities"),
]


def write_bad(tmp_path: Path, case: Bad) -> Path:
    """The case's file; the 50 MB one is made sparse (its size is what is refused)."""
    path = tmp_path / "policy.yaml"
    if case.id == "a file of 50 MB":
        path.write_bytes(b"rules:\n")
        os.truncate(path, 50 * 1024 * 1024)
    elif isinstance(case.text, bytes):
        path.write_bytes(case.text)
    else:
        path.write_text(case.text)
    return path
