"""Resubmit never loses a copy to duplicate detection, and never loses track of a selected message."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sbdlq.addresses import parse_address
from sbdlq.cli.main import app
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

DLQ = parse_address("orders/$DeadLetterQueue")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "store.db"
    eng = Engine(path)
    eng.create_queue("orders", requires_duplicate_detection=True)
    eng.send("orders", [OutboundMessage(body=b"x", message_id=f"m-{i}") for i in range(4)])
    got = eng.receive(parse_address("orders"), 4)
    eng.dead_letter(parse_address("orders"), [m.lock_token or "" for m in got], "Bad", "broken")
    eng.close()
    monkeypatch.setenv("SBDLQ_EMULATOR", str(path))
    monkeypatch.setenv("SBDLQ_CONFIG", str(tmp_path / "none.yaml"))
    return path


def test_duplicate_detection_target_is_refused_without_new_ids(store: Path) -> None:
    """The broker would accept and drop copies with a recent id while the originals were completed."""
    r = CliRunner().invoke(app, ["resubmit", "orders"])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "sbdlq: orders has duplicate detection: copies that keep their message id may be dropped by the broker "
        "while their originals are completed (rerun with --new-message-id)"
    ]
    assert Engine(store).counts("orders").dead_letter == 4


def test_duplicate_detection_target_with_new_ids_moves_everything(store: Path) -> None:
    r = CliRunner().invoke(app, ["resubmit", "orders", "--new-message-id", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    counts = Engine(store).counts("orders")
    assert (counts.active, counts.dead_letter) == (4, 0)


def test_a_selected_message_locked_elsewhere_is_reported(store: Path) -> None:
    other = Engine(store)
    (held,) = other.receive(DLQ, 1)
    r = CliRunner().invoke(app, ["resubmit", "orders", "--reason", "bad", "--new-message-id"])
    assert r.exit_code == 0, r.stderr
    assert (
        "sbdlq: note: 1 of the 4 selected message(s) were not received (taken by another receiver, "
        "locked elsewhere, or gone); any still in orders/$DeadLetterQueue are untouched"
    ) in r.stderr.splitlines()
    assert [m.message_id for m in other.peek(DLQ, 0, 10)] == [held.message_id]
