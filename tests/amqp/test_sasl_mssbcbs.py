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


def _plain(port: int, user: str, password: str) -> Any:
    """A proton connection authenticating with SASL PLAIN (as qpid-jms does with a SAS key), no token."""
    from proton.utils import BlockingConnection

    return BlockingConnection(
        f"amqp://127.0.0.1:{port}",
        sasl_enabled=True,
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
        user=user,
        password=password,
    )


def test_plain_with_the_key_name_and_key_needs_no_token(keyed_emulator: Any) -> None:
    from proton import Message

    from sbdlq.addresses import parse_address

    q = keyed_emulator.queue()
    conn = _plain(keyed_emulator.port, "RootManageSharedAccessKey", keyed_emulator.key)
    try:
        conn.create_sender(q).send(Message(body=b"by plain"))
    finally:
        conn.close()
    (stored,) = keyed_emulator.engine.peek(parse_address(q), 0, 5)
    assert stored.body.endswith(b"by plain")


@pytest.mark.parametrize(("user", "password"), [("RootManageSharedAccessKey", "wrong"), ("other", "s3cret-key")])
def test_plain_with_another_name_or_key_is_refused(keyed_emulator: Any, user: str, password: str) -> None:
    from proton import ConnectionException
    from proton.utils import LinkDetached

    with pytest.raises((ConnectionException, LinkDetached), match=r"(?i)auth|sasl"):
        conn = _plain(keyed_emulator.port, user, password)
        try:
            conn.create_sender(keyed_emulator.queue())
        finally:
            conn.close()


def test_plain_is_offered_and_any_pair_is_taken_without_a_key(emulator: Any) -> None:
    with connect(emulator.port) as sock:
        sock.sendall(SASL_HEADER)
        assert b"PLAIN" in wait_for(sock, b"ANONYMOUS")
    conn = _plain(emulator.port, "anyone", "anything")
    try:
        conn.create_receiver(emulator.queue(), credit=0)  # no token put: PLAIN authorized it
    finally:
        conn.close()
