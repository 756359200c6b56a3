"""The policy's pure parts: entity globs over a listing, relative export directories, the lock's file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbdlq.models import EntityInfo
from sbdlq.policy.loader import load_policy
from sbdlq.policy.lock import lock_path
from sbdlq.policy.plan import matching
from sbdlq.policy.schema import Rule
from sbdlq.statedir import STATE_DIR_ENV as LOCK_DIR_ENV

LISTING = [
    EntityInfo(path=path, kind=kind)
    for path, kind in [
        ("orders", "queue"),
        ("Orders-EU", "queue"),
        ("billing", "topic"),
        ("billing/Subscriptions/eu", "subscription"),
        ("billing/Subscriptions/us", "subscription"),
        ("team/a", "queue"),
    ]
]


def rule(*entities: str) -> Rule:
    return Rule(name="r", entities=entities, action="alert", options={"above": 1})


@pytest.mark.parametrize(
    ("patterns", "matched"),
    [
        (("*",), ["billing/Subscriptions/eu", "billing/Subscriptions/us", "orders", "Orders-EU", "team/a"]),
        (("orders*",), ["orders", "Orders-EU"]),  # Service Bus names are case-insensitive
        (("billing/Subscriptions/*",), ["billing/Subscriptions/eu", "billing/Subscriptions/us"]),
        (("billing/subscriptions/[e]?",), ["billing/Subscriptions/eu"]),
        (("billing",), ["billing"]),  # a topic has no DLQ: a plain name is kept, to fail as not found
        (("ORDERS", "orders", "o*"), ["orders", "Orders-EU"]),  # each entity once
        (("nowhere",), ["nowhere"]),
        (("nowhere*",), []),
    ],
)
def test_entity_globs_match_the_listing(patterns: tuple[str, ...], matched: list[str]) -> None:
    assert matching(rule(*patterns), LISTING) == matched


def test_a_relative_export_directory_is_the_policy_files(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "p.yaml"
    path.write_text("rules:\n  - {name: r, entities: [q], purge: {export: exports}}\n")
    assert load_policy(str(path)).rules[0].option("export") == str(tmp_path / "etc" / "exports")


def test_one_lock_per_policy_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    a = lock_path("policy.yaml")
    assert a == lock_path(str(tmp_path / "policy.yaml"))  # the absolute path decides
    assert a != lock_path(str(tmp_path / "other" / "policy.yaml"))
    assert a.parent == tmp_path / "state" / "locks" and a.name.startswith("policy.yaml-")
