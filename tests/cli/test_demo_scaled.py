"""`sbdlq emulator demo --messages N`: the demo's entities and reason mix at any size, always the same."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sbdlq.emulator.demo import DEFAULT_MESSAGES, scaled_mix

THOUSAND = {
    ("orders", "ValidationFailed"): 227,
    ("orders", "MaxDeliveryCountExceeded"): 182,
    ("orders", "TTLExpiredException"): 136,
    ("orders", "PaymentDeclined"): 136,
    ("orders", "DownstreamTimeout"): 46,
    ("orders", "HeaderSizeExceeded"): 15,
    ("orders", "SchemaError"): 15,
    ("orders", "UnknownTenant"): 11,
    ("events/Subscriptions/billing", "DuplicateInvoice"): 11,
    ("events/Subscriptions/bulk-orders", "DivideByZeroException"): 8,
    ("events/Subscriptions/notifications", "Session id is null."): 152,
    ("hop5", "MaxTransferHopCountExceeded"): 38,
    ("checkout/Subscriptions/billing", "PaymentGatewayTimeout"): 23,
}


def reasons(cli: Any, entity: str, *group: str) -> dict[str, int]:
    code, out, err = cli(*group, "inspect-reason", entity, "-o", "json")
    assert code == 0, err
    return {g["key"]: g["count"] for g in json.loads(out)}


def test_a_thousand_messages_in_the_demo_mix(cli: Any) -> None:
    code, out, err = cli("emulator", "demo", "--messages", "1000")
    assert (code, err) == (0, "")
    assert out == (
        f"demo: 16 entities in {cli.store}\n"
        "  orders: 768 in the DLQ (8 reasons: ValidationFailed 227, MaxDeliveryCountExceeded 182, "
        "TTLExpiredException 136, PaymentDeclined 136, DownstreamTimeout 46, HeaderSizeExceeded 15, "
        "SchemaError 15, UnknownTenant 11), 12 active, 3 scheduled\n"
        "  events/Subscriptions/billing: 11 in the DLQ (DuplicateInvoice)\n"
        "  events/Subscriptions/bulk-orders: 8 in the DLQ (DivideByZeroException)\n"
        "  events/Subscriptions/notifications: 152 in the DLQ (Session id is null.)\n"
        "  checkout/Subscriptions/billing: 23 in the DLQ (PaymentGatewayTimeout)\n"
        "  hop5: 38 in the transfer DLQ (MaxTransferHopCountExceeded)\n"
        f"try: sbdlq --emulator {cli.store} inspect-reason orders\n"
    )
    # What the summary says is what the store holds, put there the way the broker does it.
    found = {}
    for entity in (
        "orders",
        "events/Subscriptions/billing",
        "events/Subscriptions/bulk-orders",
        "checkout/Subscriptions/billing",
    ):
        found |= {(entity, r): n for r, n in reasons(cli, entity).items()}
    found |= {("events/Subscriptions/notifications", r): n for r, n in reasons(cli, NOTIFICATIONS).items()}
    found |= {("hop5", r): n for r, n in reasons(cli, "hop5", "transfer-dlq").items()}
    assert found == THOUSAND
    code, out, _ = cli("peek", "orders", "--reason", "MaxDeliveryCountExceeded", "--max", "1000", "-o", "json")
    poison = json.loads(out)
    assert len(poison) == 182 and {m["delivery_count"] for m in poison} == {3}
    code, out, _ = cli("peek", "orders", "--reason", "ValidationFailed", "--max", "1000", "-o", "json")
    flaws = {m["dead_letter_error_description"] for m in json.loads(out)}
    assert flaws == {
        "missing field customerId",
        "items must not be empty",
        "currency 'XYZ' is not supported",
        "total does not match the sum of the items",
    }
    missing = [m for m in json.loads(out) if m["dead_letter_error_description"] == "missing field customerId"]
    assert all("customerId" not in json.loads(m["body"]) for m in missing)


NOTIFICATIONS = "events/Subscriptions/notifications"


def test_the_same_seed_gives_the_same_store(cli: Any) -> None:
    cli("emulator", "demo", "--messages", "300")
    first = cli("peek", "orders", "--max", "1000", "-o", "json").json()
    cli("emulator", "demo", "--messages", "300")
    again = cli("peek", "orders", "--max", "1000", "-o", "json").json()
    # Only the times move with the wall clock.
    strip = ("sequence_number", "enqueued_time", "expires_at", "body")
    assert [{k: v for k, v in m.items() if k not in strip} for m in first] == [
        {k: v for k, v in m.items() if k not in strip} for m in again
    ]
    bodies = [{**json.loads(m["body"]), "createdAt": None} for m in first]
    assert bodies == [{**json.loads(m["body"]), "createdAt": None} for m in again]


@pytest.mark.parametrize("n", [1, 2, 5, 251, 997, 1_000_000])
def test_the_mix_adds_up_to_n_and_keeps_every_event_reason_consistent(n: int) -> None:
    mix = scaled_mix(n)
    assert sum(mix.values()) == n and min(mix.values()) >= 0
    invoices, zeros = (
        mix[("events/Subscriptions/billing", "DuplicateInvoice")],
        mix[("events/Subscriptions/bulk-orders", "DivideByZeroException")],
    )
    assert mix[(NOTIFICATIONS, "Session id is null.")] >= invoices + zeros
    assert scaled_mix(DEFAULT_MESSAGES)[("orders", "ValidationFailed")] == 60


def test_messages_must_be_positive(cli: Any) -> None:
    code, _, err = cli("emulator", "demo", "--messages", "0")
    assert code == 2 and "--messages" in err
