"""Through the unmodified SDK against `emulator serve`: fingerprints and the hints, as the CLI prints them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sbdlq.addresses import parse_address
from sbdlq.fingerprint import fingerprint

pytest.importorskip("proton")

ORDER = fingerprint("OrderNotFound", "Order 1 not found in store eu-west-1")


def dead_letter(emulator: Any, queue: str, reason: str, description: str, n: int = 1) -> None:
    emulator.seed(queue, *[f"{reason}-{i}" for i in range(n)])
    eng = emulator.engine
    got = eng.receive(parse_address(queue), n)
    eng.dead_letter(parse_address(queue), [m.lock_token for m in got if m.lock_token], reason, description)


def test_fingerprints_and_hints_through_the_sdk(emulator: Any, cli: Any) -> None:
    q = emulator.queue()
    dead_letter(emulator, q, "OrderNotFound", "Order 48213 not found in store us-east-2", 2)
    dead_letter(emulator, q, "OrderNotFound", "Customer 7 not found in store us-east-2")
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(emulator.http_port)}
    target = ("--connection-string", emulator.conn_str())

    code, out, err = cli.bare(*target, "inspect-reason", q, "--by", "fingerprint", "-o", "json", env=env)
    assert code == 0, err
    customer = fingerprint("OrderNotFound", "Customer 1 not found in store eu-west-1")
    assert [(g["fingerprint"], g["count"]) for g in json.loads(out)] == [(ORDER.id, 2), (customer.id, 1)]

    code, out, err = cli.bare(*target, "peek", q, "--fingerprint", ORDER.id[:5], "-o", "json", env=env)
    assert (code, len(json.loads(out))) == (0, 2)

    code, out, err = cli.bare(*target, "-o", "none", "purge", q, "--reason", "OrderNotFund", "--yes", env=env)
    assert (code, out) == (0, "")
    assert "--reason 'OrderNotFund': nearest OrderNotFound (3)" in err
    assert emulator.engine.counts(q).dead_letter == 3

    # A table peek over the wire reads in parallel ranges: each message passed over still feeds the hint.
    code, out, err = cli.bare(*target, "peek", q, "--reason", "OrderNotFund", env=env)
    assert code == 0, err
    assert "--reason 'OrderNotFund': nearest OrderNotFound (3)" in err
    assert "0 message(s)" in out

    code, out, err = cli.bare(*target, "peek", q + "x", env=env)
    assert code == 4
    # The serve is shared with other tests: its other queues (q3 and q1 beside q13) may be named
    # too, after it (the closest comes first).
    assert re.search(rf"\(did you mean {q}(\?\)|, | or )", err), err
