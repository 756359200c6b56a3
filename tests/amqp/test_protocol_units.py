"""The protocol layer's pieces on their own: sections, codec, SAS, $cbs, $management, errors."""

from __future__ import annotations

import functools
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

from sbdlq import errors
from sbdlq.addresses import parse_address
from sbdlq.emulator.amqp import cbs, codec, conditions, management, sas, sections
from sbdlq.emulator.amqp.broker import node_name
from sbdlq.emulator.amqp.rule_ops import RULE_OPERATIONS
from sbdlq.emulator.amqp.server import is_loopback
from sbdlq.emulator.amqp.session_ops import SESSION_OPERATIONS
from sbdlq.emulator.engine import Engine
from sbdlq.models import Message, OutboundMessage


def _message(**fields: Any) -> Message:
    base: dict[str, Any] = {"sequence_number": 7, "body": b"hi", "enqueued_time": datetime(2024, 1, 2, tzinfo=UTC)}
    return Message(**{**base, **fields})


def test_sections_split_and_reject_garbage() -> None:
    raw = codec.encode_message(_message(application_properties={"k": "v"}), delivery_count=0)
    codes = [s.code for s in sections.split(raw)]
    assert codes == [
        sections.HEADER,
        sections.MESSAGE_ANNOTATIONS,
        sections.PROPERTIES,
        sections.APPLICATION_PROPERTIES,
        sections.DATA,
    ]
    with pytest.raises(sections.MalformedMessage):
        sections.split(b"\x00\x53\x75\xa0\x09short")
    with pytest.raises(sections.MalformedMessage):
        sections.split(b"plain text")


def test_codec_round_trip_and_batch_detection() -> None:
    one = codec.encode_message(_message(body=b"a", message_id="m1", subject="s"), delivery_count=0)
    two = codec.encode_message(_message(body=b"b", message_id="m2"), delivery_count=0)
    (single,) = codec.decode_transfer(one)
    assert (single.body, single.message_id, single.subject) == (b"a", "m1", "s")
    envelope = b"".join(b"\x00\x53\x75\xb0" + len(p).to_bytes(4, "big") + p for p in (one, two))
    assert [m.body for m in codec.decode_transfer(envelope)] == [b"a", b"b"]
    # A data body that is not an encoded message stays one message.
    plain = b"\x00\x53\x75\xa0\x05hello"
    assert [m.body for m in codec.decode_transfer(plain)] == [b"hello"]


def test_value_bodies_go_back_unchanged() -> None:
    value_section = b"\x00\x53\x77\xa1\x03abc"
    (m,) = codec.decode_transfer(b"\x00\x53\x73\x45" + value_section)
    assert (m.body_type, m.body) == ("value", value_section)
    out = codec.encode_message(_message(body=m.body, body_type="value"), delivery_count=0)
    assert out.endswith(value_section)


def test_sas_tokens() -> None:
    expiry = int(time.time()) + 60
    resource = "sb://127.0.0.1:5672/orders"
    token = f"SharedAccessSignature sr={resource}&sig={sas.sign(resource, 'k', expiry)}&se={expiry}&skn=root"
    token = token.replace("+", "%2B")  # as urlencode would send it
    grant = sas.verify(token, "k")
    assert grant.covers("orders") and grant.covers("orders/sub") and not grant.covers("billing")
    with pytest.raises(sas.TokenRejected):
        sas.verify(token, "other-key")
    with pytest.raises(sas.TokenRejected):
        sas.verify(token, "k", now=expiry + 1)
    assert cbs.put_token({"operation": "put-token"}, token, "k").status == 202
    assert cbs.put_token({"operation": "put-token"}, token, "nope").status == 401


def test_a_keyless_listener_takes_any_well_formed_token_for_what_it_names() -> None:
    """Without --key the signature is not checked, but a token is still needed, well-formed and live."""
    put = functools.partial(cbs.put_token, {"operation": "put-token"}, key=None, now=1_000.0)
    signed_by_anyone = "SharedAccessSignature sr=sb%3A%2F%2Fhost%2Forders&sig=whatever&se=2000&skn=root"
    outcome = put(signed_by_anyone)
    assert outcome.status == 202 and outcome.grant is not None
    assert outcome.grant.covers("orders") and not outcome.grant.covers("billing")
    jwt = put("eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwczovL3NlcnZpY2VidXMuYXp1cmUubmV0In0.c2ln")
    assert jwt.status == 202 and jwt.grant is not None and jwt.grant.covers("billing")
    for bad in ("anything", "", "SharedAccessSignature sr=x&se=2000", signed_by_anyone.replace("se=2000", "se=500")):
        refused = put(bad)
        assert (refused.status, refused.grant) == (401, None), bad
        assert refused.description.startswith("Unauthorized: ")


def test_error_conditions_the_sdk_maps() -> None:
    assert conditions.failure_of(errors.EntityNotFound("x")).condition == "amqp:not-found"
    assert conditions.failure_of(errors.LockLost("x")).status == 410
    assert conditions.failure_of(errors.EntityDisabled("x")).condition == "com.microsoft:entity-disabled"
    assert conditions.failure_of(errors.QuotaExceeded("x")).condition == "amqp:resource-limit-exceeded"
    assert conditions.failure_of(RuntimeError("boom")).condition == "amqp:internal-error"


def test_management_replies(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "m.db")
    try:
        engine.create_queue("q")
        address = parse_address("q")
        lost = management.handle(engine, address, management.RENEW_LOCK, {"lock-tokens": [uuid.uuid4()]})
        assert (lost.status, lost.condition) == (410, conditions.LOCK_LOST)
        assert management.handle(engine, address, management.PEEK, {"from-sequence-number": 1}).status == 204
        assert management.handle(engine, address, "com.microsoft:get-rules", {}).status == 501
        missing = management.handle(engine, parse_address("nope"), management.PEEK, {})
        assert (missing.status, missing.condition) == (404, "amqp:not-found")
    finally:
        engine.close()


#: every `$management` operation serve answers, and request bodies with nothing in them
_ALL_OPERATIONS = sorted({*management._OPERATIONS, *SESSION_OPERATIONS, *RULE_OPERATIONS})
_EMPTY_BODIES = [{}, {"lock-tokens": [], "sequence-numbers": [], "messages": []}, {"lock-tokens": None}]


@pytest.mark.parametrize("operation", _ALL_OPERATIONS)
def test_every_management_reply_decodes_with_the_sdks_decoder(tmp_path: Path, operation: str) -> None:
    """An empty request never gets a reply azure-servicebus cannot read: its decoder fails on an
    empty AMQP array (a renew-lock of no tokens shut the receiver down), so none is sent."""
    from azure.servicebus._pyamqp._decode import decode_payload

    engine = Engine(tmp_path / "m.db")
    try:
        engine.create_queue("q")
        for body in _EMPTY_BODIES:
            reply = management.handle(engine, parse_address("q"), operation, body)
            decoded = decode_payload(memoryview(management.to_message(reply).encode()))
            assert decoded.application_properties[b"statusCode"] == reply.status
    finally:
        engine.close()


def test_renew_lock_of_no_tokens_is_refused_and_arrays_go_undescribed(tmp_path: Path) -> None:
    from azure.servicebus._pyamqp._decode import decode_payload
    from proton import UNDESCRIBED
    from proton import Message as ProtonMessage

    engine = Engine(tmp_path / "m.db")
    try:
        engine.create_queue("q")
        address = parse_address("q")
        for body in _EMPTY_BODIES:
            refused = management.handle(engine, address, management.RENEW_LOCK, body)
            assert (refused.status, refused.condition) == (400, conditions.ARGUMENT_ERROR)
        engine.send(address.entity, [OutboundMessage(body=b"x")])
        (held,) = engine.receive(address, 1)
        reply = management.handle(engine, address, management.RENEW_LOCK, {"lock-tokens": [held.lock_token]})
        encoded = management.to_message(reply).encode()
        # As Service Bus writes it: a plain array of timestamps (proton's Array(None, ...) is a
        # described array with a null descriptor, which a .NET client reads as described values).
        expirations = ProtonMessage()
        expirations.decode(encoded)
        assert expirations.body["expirations"].descriptor is UNDESCRIBED
        (stamp,) = decode_payload(memoryview(encoded)).value[b"expirations"]
        assert stamp > 0
    finally:
        engine.close()


def test_addresses_and_hosts() -> None:
    assert node_name("amqps://127.0.0.1:5672/orders/$DeadLetterQueue") == "orders/$DeadLetterQueue"
    assert node_name("$cbs") == "$cbs"
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
