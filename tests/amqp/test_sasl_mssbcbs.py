"""SASL `MSSBCBS` offered next to ANONYMOUS; either way a `$cbs` token comes before any link."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("proton")

from proton import symbol
from raw_amqp import AMQP_HEADER, SASL_HEADER, SASL_INIT, attach_sender, connect, drain, frame, open_session, wait_for

_MECHANISMS_HEAD = b"\x00\x53\x40"  # sasl-mechanisms
_OUTCOME_OK = b"\x00\x53\x44\xc0\x04\x02\x50\x00"  # sasl-outcome, code ok (written out)


def test_the_listener_offers_mssbcbs_and_anonymous(keyed_emulator: Any) -> None:
    with connect(keyed_emulator.port) as sock:
        sock.sendall(SASL_HEADER)
        offer = wait_for(sock, b"ANONYMOUS")
    assert _MECHANISMS_HEAD in offer
    assert b"MSSBCBS" in offer and b"ANONYMOUS" in offer


def test_mssbcbs_is_accepted_but_a_link_still_needs_a_cbs_token(keyed_emulator: Any) -> None:
    init = frame(SASL_INIT, [symbol("MSSBCBS"), b"", "localhost"], kind=1)
    with connect(keyed_emulator.port) as sock:
        sock.sendall(SASL_HEADER + init + AMQP_HEADER + open_session() + attach_sender("some-queue"))
        answer = wait_for(sock, b"unauthorized-access") + drain(sock, 0.2)
    assert _OUTCOME_OK in answer  # the SASL exchange succeeded
    assert AMQP_HEADER in answer  # and AMQP began
    assert b"amqp:unauthorized-access" in answer  # but the link without a token was refused


def test_an_unknown_mechanism_is_still_refused(emulator: Any) -> None:
    with connect(emulator.port) as sock:
        sock.sendall(SASL_HEADER + frame(SASL_INIT, [symbol("CRAM-MD5"), b""], kind=1))
        answer = wait_for(sock, b"\x00\x53\x44") + drain(sock, 0.2)
    assert b"\x00\x53\x44" in answer and _OUTCOME_OK not in answer
