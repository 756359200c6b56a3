"""`sbdlq emulator demo [--messages N]`: a realistic namespace whose dead-letter queues hold every kind of failure.

The one owner of the demo namespace: its entities (`DEMO_ENTITIES`, `_create`), the reason mix
(`BASE_MIX`: the default demo holds exactly those counts, `--messages N` the same shares of N,
by largest remainders so the counts add up to N) and the messages. Each group lands the way
the broker puts it there, in batches through the engine's public methods: poison orders are
abandoned until MaxDeliveryCount, short-lived ones expire, events without a session id are
refused by the session subscription, `amount / quantity` throws in a filter, a forwarding
chain runs out of hops, and placed orders that both of a topic's subscriptions take are shipped
by one and dead-lettered by the other (`checkout`: the targeted routing of docs/routing.md, where a resubmit of
billing's DLQ through the topic would ship them again). Application reasons are dead-lettered by the consumer, and their
messages carry the flaw they are named for: that is the data README's fix-and-replay recipes
work on (SchemaError orders whose `total` is a string, UnknownTenant orders with the tenant
`'EU '` and a `debug` property, and a `billing` queue for the invoices). Only
HeaderSizeExceeded is written by the consumer with the broker's words: 70 KB headers times N
would not be a demo any more. A seeded RNG and a clock the demo moves itself make every run
the same, spread over six hours; it runs in one transaction: the store ends up with the whole
demo or, on an error, as it was.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sbdlq.addresses import Address, EntityPath
from sbdlq.emulator.engine import HEADER_DESCRIPTION, Engine, Rule
from sbdlq.errors import EntityNotFound
from sbdlq.models import OutboundMessage

ORDERS = "orders"
EVENTS = "events"
#: the queue README's replay recipe sends invoices to
INVOICES = "billing"
HOPS = tuple(f"hop{i}" for i in range(1, 7))
#: the topic docs/routing.md's targeted routing works on: every placed order goes to billing and to shipping
CHECKOUT = "checkout"
DEMO_ENTITIES = (ORDERS, EVENTS, *HOPS, INVOICES, CHECKOUT)

HOURS = 6
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
    "SchemaError": ("total must be a number",),
    "UnknownTenant": ("tenant 'EU ' is not known",),
}
#: The misspelt tenant UnknownTenant orders carry (README: "Repair a bad property and resubmit").
BAD_TENANT = "EU "
BILLING = f"{EVENTS}/Subscriptions/billing"
BULK = f"{EVENTS}/Subscriptions/bulk-orders"
NOTIFICATIONS = f"{EVENTS}/Subscriptions/notifications"
NO_SESSION = "Session id is null."
TRANSFER = HOPS[4]  # the fifth hop: past the broker's four
CHECKOUT_BILLING = f"{CHECKOUT}/Subscriptions/billing"
CHECKOUT_SHIPPING = f"{CHECKOUT}/Subscriptions/shipping"
GATEWAY_TIMEOUT = "PaymentGatewayTimeout"
#: (where, reason, how many the default demo holds): the shares `--messages N` is split in.
BASE_MIX: tuple[tuple[str, str, int], ...] = (
    (ORDERS, "ValidationFailed", 60),
    (ORDERS, "MaxDeliveryCountExceeded", 48),
    (ORDERS, "TTLExpiredException", 36),
    (ORDERS, "PaymentDeclined", 36),
    (ORDERS, "DownstreamTimeout", 12),
    (ORDERS, "HeaderSizeExceeded", 4),
    (ORDERS, "SchemaError", 4),
    (ORDERS, "UnknownTenant", 3),
    (BILLING, "DuplicateInvoice", 3),
    (BULK, "DivideByZeroException", 2),
    (NOTIFICATIONS, NO_SESSION, 40),
    (TRANSFER, "MaxTransferHopCountExceeded", 10),
    (CHECKOUT_BILLING, GATEWAY_TIMEOUT, 6),
)
#: How many dead-lettered messages the default demo leaves.
DEFAULT_MESSAGES = sum(n for _, _, n in BASE_MIX)
BATCH = 5000
_POOL = 256  # distinct order bodies per kind; message ids stay unique


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
    engine.create_queue(INVOICES)
    # Both take every placed order: one rule in SQL, one a correlation filter (routing rewrites both).
    engine.create_topic(CHECKOUT, default_ttl_s=7 * 86400)
    engine.create_subscription(CHECKOUT, "billing", rules=[Rule("placed", sql="sys.Label = 'order.placed'")])
    engine.create_subscription(CHECKOUT, "shipping", rules=[Rule("placed", correlation={"Label": "order.placed"})])


#: the reasons whose orders carry the flaw their description names
_FLAWED = frozenset({"ValidationFailed", "SchemaError", "UnknownTenant"})


def scaled_mix(messages: int) -> dict[tuple[str, str], int]:
    """How many of each (entity, reason) make `messages` in the demo's shares; exact, summing to it."""
    total = DEFAULT_MESSAGES
    quotas = [(key, n * messages // total, n * messages % total) for *key, n in BASE_MIX]
    left = messages - sum(q for _, q, _ in quotas)
    # Largest remainders first; ties in table order (sorted is stable).
    extra = {i for i, _ in sorted(enumerate(quotas), key=lambda t: -t[1][2])[:left]}
    mix = {(k[0], k[1]): q + (i in extra) for i, (k, q, _) in enumerate(quotas)}
    # Every invoice and zero-quantity event also reaches the session subscription's DLQ.
    short = mix[(BILLING, "DuplicateInvoice")] + mix[(BULK, "DivideByZeroException")] - mix[(NOTIFICATIONS, NO_SESSION)]
    if short > 0:
        mix[(NOTIFICATIONS, NO_SESSION)] += short
        mix[(ORDERS, "ValidationFailed")] -= short
    return mix


@dataclass
class _Timeline:
    """Moves the demo clock evenly over the demo's hours, one step per batch."""

    clock: DemoClock
    step: float

    def tick(self) -> None:
        self.clock.advance(self.step)


def populate(
    engine: Engine, messages: int = DEFAULT_MESSAGES, *, now: float | None = None, seed: int = 7
) -> DemoSummary:
    """Build the demo namespace with `messages` dead-lettered messages (demo entities that exist are recreated)."""
    real_now = time.time() if now is None else now
    mix = scaled_mix(messages)
    clock = DemoClock(real_now - HOURS * 3600)
    batches = sum(-(-n // BATCH) for n in mix.values()) or 1
    timeline = _Timeline(clock, (HOURS * 3600 - 3 * LATE_S) / batches)
    rng = random.Random(seed)

    def story() -> None:
        _orders(engine, mix, rng, timeline)
        _events(engine, mix, rng, timeline)
        _chunked_send(engine, HOPS[0], _transfers(rng, mix[(TRANSFER, "MaxTransferHopCountExceeded")]), timeline)
        _checkout(engine, mix, rng, timeline)

    summary = DemoSummary(reset=stage(engine, clock, rng, real_now, story))
    _summarise(engine, summary, mix)
    return summary


def _orders(engine: Engine, mix: dict[tuple[str, str], int], rng: random.Random, timeline: _Timeline) -> None:
    """Each orders reason, batch by batch, the way its messages reach the DLQ; expiry last."""
    address = Address(EntityPath(ORDERS))
    reasons = sorted((r for e, r, _ in BASE_MIX if e == ORDERS), key=lambda r: r == "TTLExpiredException")
    for reason in reasons:
        count = mix[(ORDERS, reason)]
        descriptions = _APP_FAILURES.get(reason, (HEADER_DESCRIPTION,))
        pool = _order_pool(rng, timeline.clock, reason, descriptions)
        for start in range(0, count, BATCH):
            ids = range(start, min(start + BATCH, count))
            batch = [_numbered(pool[i % len(pool)], f"ord-{reason[:4].lower()}-{i:07d}") for i in ids]
            engine.send(ORDERS, batch)
            if reason != "TTLExpiredException":
                # Pool message i carries description i % len(descriptions): the same for its copies.
                said = {
                    m.message_id: descriptions[i % len(pool) % len(descriptions)]
                    for i, m in zip(ids, batch, strict=True)
                }
                _consume(engine, address, reason, said)
            timeline.tick()
    # Nobody came by in time for the short-lived ones: the next receive finds them expired.
    timeline.clock.advance(LATE_S)
    engine.receive(address, 1)


def _consume(engine: Engine, address: Address, reason: str, said: dict[str | None, str]) -> None:
    """The consumer fails a batch: abandoned until MaxDeliveryCount (poison), else dead-lettered."""
    if reason == "MaxDeliveryCountExceeded":
        while got := engine.receive(address, len(said)):
            engine.abandon(address, [m.lock_token for m in got if m.lock_token])
        return
    by_description: dict[str, list[str]] = {}
    for m in engine.receive(address, len(said)):
        assert m.lock_token is not None
        by_description.setdefault(said[m.message_id], []).append(m.lock_token)
    for description, tokens in by_description.items():
        engine.dead_letter(address, tokens, reason, description)


def _order_pool(
    rng: random.Random, clock: DemoClock, reason: str, descriptions: tuple[str, ...]
) -> list[OutboundMessage]:
    """Realistic order messages for one reason; the application's failures carry the flaw they are named for."""
    pool = []
    for i in range(_POOL):
        flaw = descriptions[i % len(descriptions)] if reason in _FLAWED else None
        # Half the orders with a schema error are invoices (README's replay sends them to billing).
        subject = "order.invoiced" if reason == "SchemaError" and i % 2 == 0 else None
        m = _order_message(
            rng, clock, flaw=flaw, ttl=TTL_S if reason == "TTLExpiredException" else None, subject=subject
        )
        pool.append(m)
    return pool


def _numbered(m: OutboundMessage, message_id: str) -> OutboundMessage:
    """A copy of a pool message with an id of its own."""
    return OutboundMessage(
        body=m.body,
        message_id=message_id,
        subject=m.subject,
        content_type=m.content_type,
        correlation_id=m.correlation_id,
        time_to_live_s=m.time_to_live_s,
        application_properties=dict(m.application_properties),
    )


def _events(engine: Engine, mix: dict[tuple[str, str], int], rng: random.Random, timeline: _Timeline) -> None:
    """Events without a session id: invoices billing rejects, zero quantities, and the rest."""
    invoices = mix[(BILLING, "DuplicateInvoice")]
    zeros = mix[(BULK, "DivideByZeroException")]
    total = mix[(NOTIFICATIONS, "Session id is null.")]
    _chunked_send(engine, EVENTS, _event_stream(rng, total, invoices, zeros), timeline)
    billing = Address(EntityPath(EVENTS, "billing"))
    while got := engine.receive(billing, BATCH):
        engine.dead_letter(
            billing,
            [m.lock_token for m in got if m.lock_token],
            "DuplicateInvoice",
            "invoice already issued for this order",
        )


def _event_stream(rng: random.Random, total: int, invoices: int, zeros: int) -> Iterator[OutboundMessage]:
    for i in range(total):
        if i < invoices:
            subject, quantity = "invoice.issued", rng.randint(1, 5)
        elif i < invoices + zeros:
            subject, quantity = "order.created", 0
        else:
            subject, quantity = rng.choice(("order.created", "order.shipped", "customer.updated")), rng.randint(1, 5)
        yield _event_message(rng, i, subject, rng.choice(_REGIONS), quantity)


def _checkout(engine: Engine, mix: dict[tuple[str, str], int], rng: random.Random, timeline: _Timeline) -> None:
    """Placed orders: shipping ships (completes) every one; billing's payment gateway timed out on them."""
    n = mix[(CHECKOUT_BILLING, GATEWAY_TIMEOUT)]
    placed = (_numbered(_order_message(rng, timeline.clock, subject="order.placed"), f"chk-{i:07d}") for i in range(n))
    _chunked_send(engine, CHECKOUT, placed, timeline)
    shipping, billing = Address(EntityPath(CHECKOUT, "shipping")), Address(EntityPath(CHECKOUT, "billing"))
    while got := engine.receive(shipping, BATCH):
        engine.complete(shipping, [m.lock_token for m in got if m.lock_token])
    while got := engine.receive(billing, BATCH):
        tokens = [m.lock_token for m in got if m.lock_token]
        engine.dead_letter(billing, tokens, GATEWAY_TIMEOUT, "payment-gateway did not answer within 30s")


def _transfers(rng: random.Random, n: int) -> Iterator[OutboundMessage]:
    for i in range(n):
        yield OutboundMessage(
            body=json.dumps({"transferId": f"TR-{800 + i}", "amount": round(rng.uniform(5, 500), 2)}).encode(),
            message_id=f"tr-{800 + i}",
            subject="transfer.requested",
            content_type="application/json",
            application_properties={"tenant": rng.choice(_TENANTS)},
        )


def _chunked_send(engine: Engine, entity: str, messages: Iterator[OutboundMessage], timeline: _Timeline) -> None:
    batch: list[OutboundMessage] = []
    for m in messages:
        batch.append(m)
        if len(batch) == BATCH:
            engine.send(entity, batch)
            batch = []
            timeline.tick()
    if batch:
        engine.send(entity, batch)
        timeline.tick()


def _summarise(engine: Engine, summary: DemoSummary, mix: dict[tuple[str, str], int]) -> None:
    """What landed where: the mix (the tests check it against the store), most common first."""
    summary.entities = [e.path for e in engine.list_entities() if e.path.split("/")[0] in DEMO_ENTITIES]
    for (entity, reason), n in sorted(mix.items(), key=lambda kv: -kv[1]):
        if n:
            into = summary.transfer if entity == TRANSFER else summary.dead_letters
            into.setdefault(entity, {})[reason] = n
    # In the demo's entity order.
    order = [entity for entity, _, _ in BASE_MIX]
    summary.dead_letters = dict(sorted(summary.dead_letters.items(), key=lambda kv: order.index(kv[0])))
    summary.orders_reasons = summary.dead_letters.get(ORDERS, {})
    counts = engine.counts(ORDERS)
    summary.orders_active = counts.active
    summary.orders_scheduled = counts.scheduled


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
    elif flaw == "total must be a number":
        body["total"] = f"{body['total']:.2f}"
    elif flaw == "tenant 'EU ' is not known":
        tenant = body["tenant"] = BAD_TENANT
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
        application_properties={
            "tenant": tenant,
            "region": region,
            "schemaVersion": 2,
            # The consumer logged more on the orders it could not place: README's repair drops it.
            **({"debug": True} if tenant == BAD_TENANT else {}),
        },
    )


def _utc(t: float) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=t)
