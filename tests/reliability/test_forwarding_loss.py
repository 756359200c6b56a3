"""Resubmit into an entity that auto-forwards: the copy must not vanish further down the chain.

The routing check looked only at the entity named by --to. A queue forwarding into a topic no
subscription of which takes the copy, a subscription forwarding into such a topic, and a queue
forwarding into one with duplicate detection all let the broker drop the copy while the
original was completed: exit 0, the message gone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import Cli

from sbdlq.addresses import parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    eng = Engine(path)
    eng.create_queue("orders")
    eng.create_topic("nowhere")  # no subscription: drops everything
    eng.create_queue("into-nowhere", forward_to="nowhere")
    eng.create_topic("events")
    eng.create_subscription("events", "all", forward_to="nowhere")
    eng.create_queue("dedup", requires_duplicate_detection=True)
    eng.create_queue("into-dedup", forward_to="dedup")
    eng.create_queue("plain")
    eng.create_topic("relay")
    eng.create_subscription("relay", "to-plain", forward_to="plain")
    eng.send("orders", [OutboundMessage(body=b"order %d" % i, message_id=f"m-{i}") for i in range(3)])
    address = parse_address("orders")
    eng.dead_letter(address, [m.lock_token for m in eng.receive(address, 3) if m.lock_token], "Bad", "broken")
    eng.close()
    return path


def _where(store: Path) -> tuple[int, int]:
    """(messages still in the orders DLQ, copies that came to rest anywhere)."""
    eng = Engine(store)
    try:
        left = eng.counts("orders").dead_letter
        landed = sum(eng.counts(e.path).active for e in eng.list_entities() if e.kind != "topic")
        return left, landed
    finally:
        eng.close()


@pytest.mark.parametrize(
    ("target", "status"),
    [("into-nowhere", 1), ("events", 1), ("into-dedup", 2)],
)
def test_a_copy_the_forwarding_chain_would_drop_keeps_its_original(
    store: Path, tmp_path: Path, target: str, status: int
) -> None:
    result = Cli(store, tmp_path).invoke("resubmit", "orders", "--to", target, env={"SBDLQ_EMULATOR": str(store)})
    assert result.exit_code == status, result.stderr
    assert "Traceback" not in result.stderr
    assert _where(store) == (3, 0)


def test_forwarding_into_a_queue_still_resubmits(store: Path, tmp_path: Path) -> None:
    result = Cli(store, tmp_path).invoke("resubmit", "orders", "--to", "relay", env={"SBDLQ_EMULATOR": str(store)})
    assert result.exit_code == 0, result.stderr
    assert _where(store) == (0, 3)


@pytest.mark.parametrize(
    ("target", "status", "phrase"),
    [("into-nowhere", 1, "unroutable"), ("events", 1, "unroutable"), ("into-dedup", 2, "duplicate detection")],
)
def test_replay_checks_the_forwarding_chain_too(
    store: Path, tmp_path: Path, target: str, status: int, phrase: str
) -> None:
    """Replay shares resubmit's destination check: a record the chain would drop is not sent."""
    cli = Cli(store, tmp_path)
    env = {"SBDLQ_EMULATOR": str(store)}
    exported = tmp_path / "orders.jsonl"
    peeked = cli.invoke("peek", "orders", "-o", "jsonl", env=env)
    assert peeked.exit_code == 0, peeked.stderr
    exported.write_text(peeked.stdout)
    result = cli.invoke("replay", str(exported), "--to", target, "-o", "json", env=env)
    assert result.exit_code == status, result.stderr
    assert "Traceback" not in result.stderr
    assert phrase in (result.stdout + result.stderr)
    assert _where(store) == (3, 0)  # nothing came to rest anywhere
