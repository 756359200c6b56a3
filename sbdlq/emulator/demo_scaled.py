"""`sbdlq emulator demo --messages N`: the demo's entities and reason mix, at any size.

N dead-lettered messages are split over the demo's reasons in the shares the hand-played
demo has (largest remainders, so the counts are exact and add up to N), and each group
lands the way the broker puts it there, in batches through the engine's public methods:
poison orders are abandoned until MaxDeliveryCount, short-lived ones expire, events
without a session id are refused by the session subscription, `amount / quantity` throws
in a filter, a forwarding chain runs out of hops. Application reasons are dead-lettered by
the consumer. Only HeaderSizeExceeded is written by the consumer with the broker's words:
70 KB headers times N would not be a demo any more. A seeded RNG makes every run the same.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from sbdlq.emulator.demo import (
    _APP_FAILURES,
    _REGIONS,
    _TENANTS,
    EVENTS,
    HOPS,
    HOURS,
    LATE_S,
    ORDERS,
    TTL_S,
    DemoClock,
    DemoSummary,
    _event_message,
    _order_message,
    stage,
)
from sbdlq.emulator.engine import HEADER_DESCRIPTION, Engine
from sbdlq.models import OutboundMessage
from sbdlq.paths import Address, EntityPath

BILLING = f"{EVENTS}/Subscriptions/billing"
BULK = f"{EVENTS}/Subscriptions/bulk-orders"
NOTIFICATIONS = f"{EVENTS}/Subscriptions/notifications"
TRANSFER = HOPS[4]  # the fifth hop: past the broker's four
#: (where, reason, how many in the hand-played demo): the shares N is split in.
BASE_MIX: tuple[tuple[str, str, int], ...] = (
    (ORDERS, "ValidationFailed", 60),
    (ORDERS, "MaxDeliveryCountExceeded", 48),
    (ORDERS, "TTLExpiredException", 36),
    (ORDERS, "PaymentDeclined", 36),
    (ORDERS, "DownstreamTimeout", 12),
    (ORDERS, "HeaderSizeExceeded", 4),
    (BILLING, "DuplicateInvoice", 3),
    (BULK, "DivideByZeroException", 2),
    (NOTIFICATIONS, "Session id is null.", 40),
    (TRANSFER, "MaxTransferHopCountExceeded", 10),
)
#: How many dead-lettered messages the hand-played demo leaves.
DEFAULT_MESSAGES = sum(n for _, _, n in BASE_MIX)
BATCH = 5000
_POOL = 256  # distinct order bodies per kind; message ids stay unique


def scaled_mix(messages: int) -> dict[tuple[str, str], int]:
    """How many of each (entity, reason) make `messages` in the demo's shares; exact, summing to it."""
    total = DEFAULT_MESSAGES
    quotas = [(key, n * messages // total, n * messages % total) for *key, n in BASE_MIX]
    left = messages - sum(q for _, q, _ in quotas)
    # Largest remainders first; ties in table order (sorted is stable).
    extra = {i for i, _ in sorted(enumerate(quotas), key=lambda t: -t[1][2])[:left]}
    mix = {(k[0], k[1]): q + (i in extra) for i, (k, q, _) in enumerate(quotas)}
    # Every invoice and zero-quantity event also reaches the session subscription's DLQ.
    short = (
        mix[(BILLING, "DuplicateInvoice")] + mix[(BULK, "DivideByZeroException")] - mix[(NOTIFICATIONS, BASE_MIX[8][1])]
    )
    if short > 0:
        mix[(NOTIFICATIONS, BASE_MIX[8][1])] += short
        mix[(ORDERS, "ValidationFailed")] -= short
    return mix


@dataclass
class _Timeline:
    """Moves the demo clock evenly over the demo's hours, one step per batch."""

    clock: DemoClock
    step: float

    def tick(self) -> None:
        self.clock.advance(self.step)


def populate_scaled(engine: Engine, messages: int, *, now: float | None = None, seed: int = 7) -> DemoSummary:
    """Build the demo namespace with `messages` dead-lettered messages (demo entities are recreated)."""
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
    """Realistic order messages for one reason; ValidationFailed ones carry the flaw they are named for."""
    pool = []
    for i in range(_POOL):
        flaw = descriptions[i % len(descriptions)] if reason == "ValidationFailed" else None
        m = _order_message(rng, clock, flaw=flaw, ttl=TTL_S if reason == "TTLExpiredException" else None)
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
    summary.entities = [e.path for e in engine.list_entities() if e.path.split("/")[0] in (ORDERS, EVENTS, *HOPS)]
    for (entity, reason), n in sorted(mix.items(), key=lambda kv: -kv[1]):
        if n:
            into = summary.transfer if entity == TRANSFER else summary.dead_letters
            into.setdefault(entity, {})[reason] = n
    # In the demo's entity order, as the hand-played summary lists them.
    order = [entity for entity, _, _ in BASE_MIX]
    summary.dead_letters = dict(sorted(summary.dead_letters.items(), key=lambda kv: order.index(kv[0])))
    summary.orders_reasons = summary.dead_letters.get(ORDERS, {})
    counts = engine.counts(ORDERS)
    summary.orders_active = counts.active
    summary.orders_scheduled = counts.scheduled
