"""Fixtures the console's pilot tests and terminal tests share."""

from __future__ import annotations

import pytest
from support import Seeder

from sbdlq.addresses import Address, parse_entity
from sbdlq.backends.base import ReceiveMode


@pytest.fixture
def dlqs(seed: Seeder) -> Seeder:
    """orders: 3 Timeout + 2 Poison in its DLQ; billing: 1 in its DLQ; an empty queue."""
    seed.queue("orders")
    seed.queue("billing")
    seed.queue("empty")
    seed.dead_letter("orders", 3, reason="Timeout", prefix="t")
    seed.dead_letter("orders", 2, reason="Poison", prefix="p")
    seed.dead_letter("billing", 1, reason="Bad", prefix="b")
    return seed


@pytest.fixture
def fan_out(seed: Seeder) -> Seeder:
    """Topic t with subscriptions s1 and s2 (both take everything); s1's DLQ holds f0, f1 and s2
    holds nothing: a resubmit of s1's DLQ would give s2 a copy of each."""
    seed.topic("t", "s1", "s2")
    seed.dead_letter("t/Subscriptions/s1", 2, prefix="f")
    seed.engine.receive(Address(parse_entity("t/Subscriptions/s2")), 10, mode=ReceiveMode.RECEIVE_AND_DELETE)
    return seed
