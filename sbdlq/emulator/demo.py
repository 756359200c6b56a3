"""`sbdlq emulator demo`: a realistic namespace whose dead-letter queues hold every kind of failure.

The demo replays six hours of traffic on a clock it moves itself, so messages carry a
spread of enqueued times, TTLs really expire and nothing sleeps. It runs in one
transaction: the store ends up with the whole demo or, on an error, as it was.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sbdlq.emulator.engine import Engine, Rule
from sbdlq.errors import EntityNotFound
from sbdlq.models import OutboundMessage
from sbdlq.paths import Address, EntityPath, SubQueue

ORDERS = "orders"
EVENTS = "events"
HOPS = tuple(f"hop{i}" for i in range(1, 7))
DEMO_ENTITIES = (ORDERS, EVENTS, *HOPS)

HOURS = 6
ROUNDS = 12  # one batch of traffic every half hour
TTL_S = 300.0  # the short-lived messages that expire into the DLQ
LATE_S = 600.0  # how long they wait before a receiver comes by

_TENANTS = ("contoso", "fabrikam", "northwind", "tailspin", "adventure-works")
_REGIONS = ("westeurope", "northeurope", "eastus", "westus2")
_CURRENCIES = {"westeurope": "EUR", "northeurope": "EUR", "eastus": "USD", "westus2": "USD"}
_SKUS = ("SKU-1042", "SKU-2210", "SKU-3307", "SKU-4120", "SKU-5581", "SKU-6019")

# Application dead-letter reasons and the descriptions a real order processor would write.
_APP_FAILURES: dict[str, tuple[str, ...]] = {
    "ValidationFailed": (
        "missing field customerId",
        "items must not be empty",
        "currency 'XYZ' is not supported",
        "total does not match the sum of the items",
    ),
    "PaymentDeclined": (
        "card declined: insufficient funds",
        "card expired",
        "fraud check failed (score 0.93)",
    ),
    "DownstreamTimeout": ("inventory-service did not answer within 30s",),
}
# Per round: how many messages meet each fate (plus healthy ones that complete).
_PER_ROUND = {
    "ok": 6,
    "poison": 4,
    "expire": 3,
    "ValidationFailed": 5,
    "PaymentDeclined": 3,
    "DownstreamTimeout": 1,
}
_HEADER_ROUNDS = (2, 5, 9, 11)  # rounds that carry one oversized header each


@dataclass
class DemoSummary:
    """What the demo created: DLQ contents per entity, for the closing summary."""

    reset: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    orders_reasons: dict[str, int] = field(default_factory=dict)
    orders_active: int = 0
    orders_scheduled: int = 0
    dead_letters: dict[str, dict[str, int]] = field(default_factory=dict)  # entity → reason → count
    transfer: dict[str, dict[str, int]] = field(default_factory=dict)


class DemoClock:
    """The broker clock during the demo: starts hours ago, moved forward by the script."""

    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def populate(engine: Engine, *, now: float | None = None, seed: int = 7) -> DemoSummary:
    """Build the demo namespace in engine's store (demo entities that exist are recreated first)."""
    real_now = time.time() if now is None else now
    clock = DemoClock(real_now - HOURS * 3600)
    rng = random.Random(seed)

    def story() -> None:
        # Each entity gets its own stretch of the timeline, ending before the real now.
        _orders(engine, clock, rng)
        clock.t = real_now - 5.5 * 3600
        _events(engine, clock, rng)
        clock.t = real_now - 3600
        _hops(engine, clock, rng)

    summary = DemoSummary(reset=stage(engine, clock, rng, real_now, story))
    _summarise(engine, summary)
    return summary


def stage(
    engine: Engine, clock: DemoClock, rng: random.Random, real_now: float, story: Callable[[], None]
) -> list[str]:
    """Recreate the demo entities and play `story` on the demo clock, in one transaction; the names reset.

    Both demos (hand-played and scaled) end the same way: a dozen orders still waiting and a few
    scheduled for the next hours.
    """
    saved: Callable[[], float] = engine.clock
    engine.clock = clock
    try:
        with engine.store.write():
            reset = _reset(engine)
            _create(engine)
            story()
            clock.t = real_now - 60
            engine.send(ORDERS, [_order_message(rng, clock) for _ in range(12)])
            engine.send(
                ORDERS,
                [
                    _order_message(rng, clock, scheduled=_utc(real_now + 3600 * (i + 1)), subject="order.reminder")
                    for i in range(3)
                ],
            )
    finally:
        engine.clock = saved
    return reset


def _reset(engine: Engine) -> list[str]:
    removed = []
    for name in DEMO_ENTITIES:
        try:
            engine.delete_entity(name)
        except EntityNotFound:
            continue
        removed.append(name)
    return removed


def _create(engine: Engine) -> None:
    engine.create_queue(
        ORDERS,
        max_delivery_count=3,
        dead_lettering_on_expiration=True,
        default_ttl_s=14 * 86400,
        lock_duration_s=30,
    )
    engine.create_topic(EVENTS, default_ttl_s=7 * 86400)
    engine.create_subscription(
        EVENTS, "billing", rules=[Rule("invoices", correlation={"Label": "invoice.issued"})], max_delivery_count=5
    )
    engine.create_subscription(
        EVENTS,
        "eu-audit",
        rules=[Rule("eu-high-priority", sql="region LIKE '%europe' AND priority >= 3", action="SET audited = 'eu'")],
    )
    # amount / quantity throws for quantity 0: those events land in this subscription's DLQ.
    engine.create_subscription(
        EVENTS,
        "bulk-orders",
        rules=[Rule("large-unit-value", sql="sys.Label = 'order.created' AND amount / quantity > 100")],
        dead_lettering_on_filter_exceptions=True,
    )
    engine.create_subscription(EVENTS, "notifications", requires_session=True)
    for here, there in itertools.pairwise(HOPS):
        engine.create_queue(here, forward_to=there)
    engine.create_queue(HOPS[-1])


def _orders(engine: Engine, clock: DemoClock, rng: random.Random) -> None:
    """Half-hourly batches: most complete, the rest fail in every way an order processor sees."""
    address = Address(EntityPath(ORDERS))
    step = HOURS * 3600 / ROUNDS
    for r in range(ROUNDS):
        start = clock.t
        # Short-lived messages first: nobody reads them before they expire.
        engine.send(ORDERS, [_order_message(rng, clock, ttl=TTL_S) for _ in range(_PER_ROUND["expire"])])
        clock.advance(LATE_S)
        fates: dict[str, tuple[str, ...]] = {}
        batch = []
        for fate, n in _PER_ROUND.items():
            if fate == "expire":
                continue
            for _ in range(n):
                if fate in _APP_FAILURES:
                    action: tuple[str, ...] = ("dead-letter", fate, rng.choice(_APP_FAILURES[fate]))
                else:
                    action = ("abandon",) if fate == "poison" else ("complete",)
                m = _order_message(rng, clock, flaw=action[2] if fate == "ValidationFailed" else None)
                assert m.message_id is not None
                fates[m.message_id] = action
                batch.append(m)
        rng.shuffle(batch)
        engine.send(ORDERS, batch)
        if r in _HEADER_ROUNDS:
            # A 70 KB trace header: the broker refuses to deliver it (HeaderSizeExceeded).
            big = _order_message(rng, clock)
            big.application_properties["x-debug-trace"] = "frame;" * (70 * 1024 // 6)
            engine.send(ORDERS, [big])
        # The consumer: poison messages fail every attempt until MaxDeliveryCount is spent.
        while True:
            clock.advance(rng.uniform(20, 90))
            got = engine.receive(address, 100)
            if not got:
                break
            by_action: dict[tuple[str, ...], list[str]] = {}
            for received in got:
                assert received.lock_token is not None and received.message_id is not None
                key = fates.get(received.message_id, ("complete",))
                by_action.setdefault(key, []).append(received.lock_token)
            for key, tokens in by_action.items():
                if key[0] == "complete":
                    engine.complete(address, tokens)
                elif key[0] == "abandon":
                    engine.abandon(address, tokens)
                else:
                    engine.dead_letter(address, tokens, key[1], key[2])
        clock.t = start + step


def _event_message(rng: random.Random, i: int, subject: str, region: str, quantity: int) -> OutboundMessage:
    """Domain event number i; the amount, tenant and priority are drawn here (in that order)."""
    amount = round(rng.uniform(20, 900), 2)
    body = {"eventId": f"EVT-{5000 + i}", "type": subject, "region": region, "amount": amount}
    return OutboundMessage(
        body=json.dumps(body).encode(),
        message_id=f"evt-{5000 + i}",
        subject=subject,
        content_type="application/json",
        application_properties={
            "tenant": rng.choice(_TENANTS),
            "region": region,
            "priority": rng.randint(1, 5),
            "amount": amount,
            "quantity": quantity,
        },
    )


def _events(engine: Engine, clock: DemoClock, rng: random.Random) -> None:
    """Domain events on the topic; none carry a session id, which the session subscription refuses."""
    subjects = ("invoice.issued", "order.created", "order.shipped", "customer.updated")
    events = []
    for i in range(40):
        subject = subjects[i % len(subjects)]
        region = rng.choice(_REGIONS)
        quantity = 0 if i % 9 == 1 else rng.randint(1, 5)
        events.append(_event_message(rng, i, subject, region, quantity))
    # Spread over the demo's hours, a few at a time.
    for chunk in range(0, len(events), 5):
        engine.send(EVENTS, events[chunk : chunk + 5])
        clock.advance(rng.uniform(600, 1800))
    # Billing rejects a few invoices it has already seen.
    billing = Address(EntityPath(EVENTS, "billing"))
    got = engine.receive(billing, 100)
    dup = [m.lock_token for m in got[:3] if m.lock_token]
    engine.dead_letter(billing, dup, "DuplicateInvoice", "invoice already issued for this order")
    engine.complete(billing, [m.lock_token for m in got[3:] if m.lock_token])


def _hops(engine: Engine, clock: DemoClock, rng: random.Random) -> None:
    """Messages sent down a forwarding chain longer than the broker's four hops."""
    msgs = [
        OutboundMessage(
            body=json.dumps({"transferId": f"TR-{800 + i}", "amount": round(rng.uniform(5, 500), 2)}).encode(),
            message_id=f"tr-{800 + i}",
            subject="transfer.requested",
            content_type="application/json",
            application_properties={"tenant": rng.choice(_TENANTS)},
        )
        for i in range(10)
    ]
    engine.send(HOPS[0], msgs)


def _order_message(
    rng: random.Random,
    clock: DemoClock,
    *,
    ttl: float | None = None,
    flaw: str | None = None,
    scheduled: datetime | None = None,
    subject: str | None = None,
) -> OutboundMessage:
    number = rng.randint(10000, 99999)
    region = rng.choice(_REGIONS)
    tenant = rng.choice(_TENANTS)
    items: list[dict[str, Any]] = [
        {"sku": rng.choice(_SKUS), "qty": rng.randint(1, 4), "price": round(rng.uniform(4, 120), 2)}
        for _ in range(rng.randint(1, 3))
    ]
    body: dict[str, Any] = {
        "orderId": f"ORD-{number}",
        "customerId": f"C-{rng.randint(1000, 9999)}",
        "tenant": tenant,
        "items": items,
        "total": round(sum(i["qty"] * i["price"] for i in items), 2),
        "currency": _CURRENCIES[region],
        "createdAt": _utc(clock.t).isoformat().replace("+00:00", "Z"),
    }
    # A ValidationFailed order really has the flaw its description names.
    if flaw == "missing field customerId":
        body.pop("customerId")
    elif flaw == "items must not be empty":
        body.update(items=[], total=0)
    elif flaw == "currency 'XYZ' is not supported":
        body["currency"] = "XYZ"
    elif flaw is not None:
        body["total"] = round(body["total"] + 10, 2)
    return OutboundMessage(
        body=json.dumps(body).encode(),
        message_id=f"ord-{number}-{rng.randint(0, 9999):04d}",
        subject=subject or rng.choice(("order.created", "order.created", "order.updated", "order.cancelled")),
        content_type="application/json",
        correlation_id=f"req-{rng.getrandbits(32):08x}",
        time_to_live_s=ttl,
        scheduled_enqueue_time=scheduled,
        application_properties={"tenant": tenant, "region": region, "schemaVersion": 2},
    )


def _utc(t: float) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=t)


def _summarise(engine: Engine, summary: DemoSummary) -> None:
    """Count what landed where (with the real clock again)."""
    summary.entities = [e.path for e in engine.list_entities() if e.path.split("/")[0] in DEMO_ENTITIES]
    for path in summary.entities:
        entity = engine.get_entity(path)
        if entity.kind == "topic":
            continue
        target = Address(EntityPath(*path.split("/Subscriptions/")) if "/Subscriptions/" in path else EntityPath(path))
        for sub_queue, into in (
            (SubQueue.DEAD_LETTER, summary.dead_letters),
            (SubQueue.TRANSFER_DEAD_LETTER, summary.transfer),
        ):
            reasons = Counter(
                m.dead_letter_reason or "(none)" for m in engine.peek(Address(target.entity, sub_queue), 0, 100_000)
            )
            if reasons:
                into[path] = dict(reasons.most_common())
    summary.orders_reasons = summary.dead_letters.get(ORDERS, {})
    counts = engine.counts(ORDERS)
    summary.orders_active = counts.active
    summary.orders_scheduled = counts.scheduled
