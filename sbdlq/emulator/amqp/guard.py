"""Guards in front of the broker: byte caps on incoming deliveries, grant expiry, admission.

`Guard` wraps the broker as the driver's handler. It sees every proton event first, so a
client streaming an endless delivery is cut off before proton has buffered more than a
link's cap, and links whose token expired are detached on the next tick.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from proton import Condition, Connection, Delivery, Endpoint, Event, Link, Receiver, symbol

from sbdlq.emulator.engine.errors import MessageTooLarge

from . import cbs, conditions
from .broker import CBS_NODE, MANAGEMENT_SUFFIX, Broker, node_name
from .limits import DISCARD_MAX_BYTES

log = logging.getLogger(__name__)

MESSAGE_SIZE_EXCEEDED = conditions.MESSAGE_SIZE_EXCEEDED
_CAP = "sbdlq_max_bytes"  # attribute proton keeps on a link object
_REJECTS = "sbdlq_rejects_oversized"  # on a link: reject oversized deliveries instead of detaching
_SEEN = "sbdlq_bytes_seen"  # on an oversized delivery: the bytes read (and dropped) so far


def cap_link(link: Link, max_bytes: int, *, reject: bool = False) -> None:
    """Refuse deliveries over max_bytes on this (receiving) link.

    By default the link is detached at that point. With reject, the rest of the delivery is
    read and dropped as it arrives and the delivery is then rejected, as Service Bus answers
    an oversized message (the SDK raises MessageSizeExceededError and the link stays up).
    """
    setattr(link, _CAP, int(max_bytes))
    setattr(link, _REJECTS, reject)


def link_cap(link: Link) -> int | None:
    """The byte cap set on a link, if any."""
    value = getattr(link, _CAP, None)
    return int(value) if value is not None else None


def _detach(link: Link, condition: str, description: str) -> None:
    """Detach a link with an error, as the broker does (the connection stays up)."""
    if link.state & Endpoint.LOCAL_CLOSED:
        return
    link.condition = Condition(symbol(condition), description, {})
    link.close()


class Guard:
    """A driver handler that enforces limits and passes everything else to the broker."""

    def __init__(
        self,
        broker: Broker,
        *,
        request_max_bytes: int,
        clock: Callable[[], float],
        discard_max_bytes: int = DISCARD_MAX_BYTES,
    ) -> None:
        self.broker = broker
        self.request_max_bytes = request_max_bytes
        self.discard_max_bytes = discard_max_bytes  # an oversized delivery longer than this: detach
        self.clock = clock
        self.watched: dict[Link, str] = {}  # links opened under a grant: the path it must cover

    # ------------------------------------------------------------------ driver hooks

    def dispatch(self, event: Event) -> None:
        """Check the event against the limits, then let the broker handle it."""
        kind = event.type.method
        if kind == "on_delivery" and self._over_cap(event):
            return
        if kind == "on_link_remote_open":
            self._cap_requests(event.link)
        self.broker.dispatch(event)
        if kind == "on_link_remote_open":
            self._cap_intake(event.link)
            self._watch(event.link)
        elif kind in ("on_link_remote_close", "on_link_final"):
            self.watched.pop(event.link, None)  # type: ignore[arg-type]

    def tick(self) -> None:
        """Detach links whose grant expired, then let the broker deliver what became available."""
        self._expire()
        self.broker.tick()

    def connection_gone(self, connection: Connection) -> None:
        """Forget the connection's links here and in the broker."""
        for link in [lk for lk in self.watched if lk.connection == connection]:
            del self.watched[link]
        self.broker.connection_gone(connection)

    def admitted(self, connection: Connection) -> bool:
        """Whether a client has done enough to keep its connection past the auth timeout.

        A put-token accepted (any live grant), with a key or without: no link works without one.
        """
        peer = self.broker.peers.get(connection)
        now = self.clock()
        return peer is not None and any(g.live(now) for g in peer.grants)

    # ------------------------------------------------------------------ byte caps

    def _cap_requests(self, link: Link | None) -> None:
        if link is None or not isinstance(link, Receiver):
            return
        node = node_name(link.remote_target.address)
        if node == CBS_NODE or node.lower().endswith(MANAGEMENT_SUFFIX):
            link.max_message_size = self.request_max_bytes  # advertised on our attach
            cap_link(link, self.request_max_bytes)

    def _cap_intake(self, link: Link | None) -> None:
        """Cap a client's sender to a queue or topic at the entity's maximum message size, the
        max-message-size the broker advertised on attach (a batch is one delivery: it fits too)."""
        if link is None or link not in self.broker.intakes or link_cap(link) is not None:
            return
        if link.max_message_size:
            cap_link(link, link.max_message_size, reject=True)

    def _over_cap(self, event: Event) -> bool:
        """Refuse a delivery that grew past its link's cap, dropping what was buffered."""
        link, delivery = event.link, event.delivery
        if not isinstance(link, Receiver) or delivery is None:
            return False
        if link.state & Endpoint.LOCAL_CLOSED:
            self._discard(link, delivery)  # frames the client sent before it saw our detach
            return True
        cap = link_cap(link)
        seen = getattr(delivery, _SEEN, None)
        if cap is None or (seen is None and delivery.pending <= cap):
            return False
        seen = (seen or 0) + delivery.pending
        setattr(delivery, _SEEN, seen)
        node = node_name(link.remote_target.address)
        if not getattr(link, _REJECTS, False) or seen > self.discard_max_bytes:
            log.info("emulator: delivery on %r over %d bytes: link detached", node, cap)
            self._discard(link, delivery)
            _detach(link, MESSAGE_SIZE_EXCEEDED, MessageTooLarge.text(seen, cap))
            return True
        self._discard(link, delivery)
        if not delivery.partial and not delivery.aborted:
            log.info("emulator: a %d-byte message to %r refused (limit %d bytes)", seen, node, cap)
            self._reject_oversized(delivery, seen, cap)
            self.broker.top_up(link)
        return True

    @staticmethod
    def _reject_oversized(delivery: Delivery, size: int, cap: int) -> None:
        """Reject as the broker does; the info map is there because SDKs index it."""
        info: dict[Any, Any] = {symbol("com.microsoft:tracking-id"): uuid.uuid4().hex}
        delivery.local.condition = Condition(symbol(MESSAGE_SIZE_EXCEEDED), MessageTooLarge.text(size, cap), info)
        delivery.update(Delivery.REJECTED)
        delivery.settle()

    @staticmethod
    def _discard(link: Receiver, delivery: Delivery) -> None:
        """Free what proton buffered for the delivery (it is never stored)."""
        while delivery.pending > 0:
            if not link.recv(min(delivery.pending, 1 << 20)):
                break
        if not delivery.partial:
            delivery.settle()

    # ------------------------------------------------------------------ grant expiry

    def _watch(self, link: Link | None) -> None:
        if link is None or self.broker.key is None or not link.state & Endpoint.LOCAL_ACTIVE:
            return
        remote: Any = link.remote_source if link.is_sender else link.remote_target
        node = node_name(remote.address)
        if node == CBS_NODE:
            return
        if node.lower().endswith(MANAGEMENT_SUFFIX):
            node = node[: -len(MANAGEMENT_SUFFIX)]
        self.watched[link] = node

    def _expire(self) -> None:
        """Detach links no live grant covers any more (their token expired and none replaced it)."""
        if not self.watched:
            return
        now = self.clock()
        for link, path in list(self.watched.items()):
            peer = self.broker.peers.get(link.connection)
            if peer is not None and cbs.authorized(peer.grants, path, now):
                continue
            del self.watched[link]
            log.info("emulator: token for %r expired: link detached", path)
            self.broker.feeds.pop(link, None)
            _detach(link, conditions.UNAUTHORIZED, f"The token for '{path}' has expired: put a new one on $cbs.")
