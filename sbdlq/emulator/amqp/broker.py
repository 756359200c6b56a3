"""Proton event handling: links, credit, deliveries and dispositions, mapped onto the engine.

The rules live in the engine; this layer only translates. Each client receiver is a
`_Feed` (our sender link), each client sender an `_Intake` (our receiver link), and the
`$cbs` and `<entity>/$management` nodes are request links answered on the reply link
the client attached for the same node.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from proton import (
    Condition,
    Connection,
    Delivery,
    Endpoint,
    Event,
    Link,
    Message,
    Receiver,
    Sender,
    Session,
    Terminus,
    int32,
    symbol,
)

from sbdlq.addresses import Address, EntityPath, SubQueue, parse_address
from sbdlq.emulator.engine import Engine
from sbdlq.emulator.engine.errors import NoSessionAvailable
from sbdlq.emulator.engine.vocabulary import MAX_MESSAGE_KB
from sbdlq.errors import AuthError, InvalidOperation, TransientError
from sbdlq.models import ReceiveMode

from . import cbs, codec, conditions, management, session_links
from .frame_repair import MESSAGE_FORMAT, PLAIN_AUTHORIZED
from .plain_values import as_text, to_plain
from .sas import Grant
from .sections import MalformedMessage

log = logging.getLogger(__name__)

CBS_NODE = "$cbs"
MANAGEMENT_SUFFIX = "/$management"
T = TypeVar("T")
_CREDIT = 500  # credit granted to client senders, topped up as it is used
_TOKEN = "sbdlq_lock_token"  # attribute proton keeps on our deliveries
# What our reply links advertise: a peek reply holds several messages, so Premium's largest.
REPLY_MAX_BYTES = MAX_MESSAGE_KB * 1024


def _present(value: T | None) -> T:
    """An event's link, session, connection or delivery: proton sets it on events of its kind (narrows Optional)."""
    assert value is not None
    return value


def _link(event: Event) -> Link:
    return _present(event.link)


def _connection(event: Event) -> Connection:
    return _present(event.connection)


def _session(event: Event) -> Session:
    return _present(event.session)


def _delivery(event: Event) -> Delivery:
    return _present(event.delivery)


def _condition(failure: conditions.Failure) -> Condition:
    """An AMQP error with an info map: azure-servicebus indexes error[2] on rejected sends."""
    info: dict[Any, Any] = {symbol("com.microsoft:tracking-id"): uuid.uuid4().hex}
    return Condition(failure.condition, failure.description, info)


def _new_delivery(link: Sender, tag: bytes) -> Delivery:
    """A delivery with a binary tag (proton accepts bytes; its annotation says str)."""
    return link.delivery(tag)  # type: ignore[arg-type]


def _message_format(delivery: Delivery) -> int | None:
    """The message-format a client's delivery came with, as the wire filter read it (None: unknown)."""
    read = getattr(delivery.link.connection, MESSAGE_FORMAT, None)
    try:
        tag = delivery.tag  # proton decodes tags as UTF-8, and raises on one that is not
    except UnicodeDecodeError:
        return None
    return read(delivery.link.name, tag) if read is not None else None


def node_name(address: str | None) -> str:
    """A link address without the `amqps://host/` prefix SDKs put on it."""
    text = (address or "").strip()
    if "://" in text:
        text = text.split("://", 1)[1]
        text = text.split("/", 1)[1] if "/" in text else ""
    return text.strip("/")


@dataclass(eq=False, slots=True)
class _Feed:
    """Our sender link serving a client receiver on a queue, subscription or sub-queue."""

    link: Sender
    address: Address
    mode: ReceiveMode
    session_id: str | None = None
    holder: str | None = None  # the session lock's holder token, for a session receiver


@dataclass(eq=False, slots=True)
class _Intake:
    """Our receiver link taking a client's messages for a queue or topic."""

    link: Receiver
    entity: EntityPath


@dataclass(eq=False, slots=True)
class _Requests:
    """Our receiver link for requests to `$cbs` or an entity's `$management` node."""

    link: Receiver
    node: str
    address: Address | None  # None for $cbs


@dataclass(eq=False)
class _Peer:
    """Per-connection state: what its tokens grant, and the reply links a `reply-to` can name."""

    grants: list[Grant] = field(default_factory=list)
    by_address: dict[str, Sender] = field(default_factory=dict)  # the reply link's target address
    by_name: dict[str, Sender] = field(default_factory=dict)  # the reply link's name
    by_node: dict[str, Sender] = field(default_factory=dict)  # for requests without reply-to ($cbs)
    outbox: dict[Sender, list[bytes]] = field(default_factory=dict)  # replies waiting for credit

    def forget(self, link: Link) -> None:
        """Drop a closed reply link, and the replies still waiting for it."""
        for table in (self.by_address, self.by_name, self.by_node):
            for key in [k for k, v in table.items() if v == link]:
                del table[key]
        self.outbox.pop(link, None)  # type: ignore[call-overload]

    def reply_link(self, reply_to: str | None, node: str) -> Sender | None:
        """The link a reply goes to: the one whose target address or name `reply-to` is.

        A request with no reply-to, or one naming the node itself (`$cbs`), is answered on the
        node's reply link of this connection.
        """
        if not reply_to:
            return self.by_node.get(node.lower())
        named = node_name(reply_to).lower()
        found = self.by_address.get(named) or self.by_name.get(reply_to)
        if found is None and named == node.lower():
            return self.by_node.get(named)
        return found


class Broker:
    """The proton handler: call `dispatch` for every event and `tick` periodically."""

    def __init__(self, engine: Engine, *, key: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.key = key
        self.clock = clock  # judges token expiry (tests shift it)
        self.peers: dict[Connection, _Peer] = {}
        self.feeds: dict[Link, _Feed] = {}
        self.intakes: dict[Link, _Intake] = {}
        self.requests: dict[Link, _Requests] = {}
        self.waiting: dict[Link, session_links.WaitingAttach] = {}  # next-available, none free yet
        self._tags = itertools.count(1)

    # ------------------------------------------------------------------ driver hooks

    def dispatch(self, event: Event) -> None:
        """Route one proton event to its `on_*` method."""
        method = getattr(self, event.type.method, None)
        if method is not None:
            method(event)

    def tick(self) -> None:
        """Deliver what became available (lock expiry, scheduled time, other processes)."""
        self._retry_waiting()
        for feed in list(self.feeds.values()):
            self._pump(feed)

    def connection_gone(self, connection: Connection) -> None:
        """Forget a connection's links; their locked messages keep their locks until expiry."""
        self.peers.pop(connection, None)
        for link in [lk for lk in self.feeds if lk.connection == connection]:
            self._release_session(self.feeds.pop(link))
        tables: tuple[dict[Link, Any], ...] = (self.intakes, self.requests, self.waiting)
        for table in tables:
            for link in [lk for lk in table if lk.connection == connection]:
                del table[link]

    # ------------------------------------------------------------------ endpoints

    def on_connection_remote_open(self, event: Event) -> None:
        conn = _connection(event)
        conn.container = "sbdlq-emulator"
        conn.open()
        peer = self.peers[conn] = _Peer()
        plain = getattr(conn, PLAIN_AUTHORIZED, None)
        if plain is not None and plain():
            peer.grants.append(Grant(""))  # SASL PLAIN with the key: the namespace, as a namespace token

    def on_transport_error(self, event: Event) -> None:
        # Proton has already written its close frame by now; frame_repair.py gives its error an info map.
        condition = event.transport.condition if event.transport is not None else None
        if condition is not None:
            log.info("emulator: closing a connection: %s: %s", condition.name, condition.description)

    def on_connection_remote_close(self, event: Event) -> None:
        _connection(event).close()

    def on_session_remote_open(self, event: Event) -> None:
        _session(event).open()

    def on_session_remote_close(self, event: Event) -> None:
        _session(event).close()

    def on_link_remote_close(self, event: Event) -> None:
        link = _link(event)
        feed = self.feeds.pop(link, None)
        if feed is not None:
            self._release_session(feed)
        self.waiting.pop(link, None)
        self.intakes.pop(link, None)
        self.requests.pop(link, None)
        peer = self.peers.get(link.connection)
        if peer is not None:
            peer.forget(link)
        if link.state & Endpoint.LOCAL_ACTIVE:
            link.close()

    def on_link_remote_open(self, event: Event) -> None:
        link = _link(event)
        remote = link.remote_source if link.is_sender else link.remote_target
        node = node_name(remote.address)
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        try:
            if node == CBS_NODE:
                self._attach_node(link, node, None)
            elif node.lower().endswith(MANAGEMENT_SUFFIX):
                address = parse_address(node[: -len(MANAGEMENT_SUFFIX)])
                self._authorize(link.connection, str(address))
                self.engine.get_entity(address.entity)
                self._attach_node(link, node, address)
            elif isinstance(link, Sender):
                self._attach_feed(link, parse_address(node))
            else:
                assert isinstance(link, Receiver)
                self._attach_intake(link, parse_address(node))
        except Exception as exc:
            self._refuse(link, conditions.failure_of(exc))

    def _attach_node(self, link: Link, node: str, address: Address | None) -> None:
        key = node.lower()
        if isinstance(link, Sender):
            # Replies go out settled; mixed mode tells the client we decide per delivery.
            link.snd_settle_mode = Link.SND_MIXED
            link.max_message_size = REPLY_MAX_BYTES
            link.open()
            peer = self.peers.setdefault(link.connection, _Peer())
            peer.by_node[key] = link
            peer.by_name[link.name] = link
            if link.remote_target.address:
                peer.by_address[node_name(link.remote_target.address).lower()] = link
        else:
            assert isinstance(link, Receiver)
            link.open()
            link.flow(_CREDIT)
            self.requests[link] = _Requests(link, key, address)

    def _attach_feed(self, link: Sender, address: Address) -> None:
        self._authorize(link.connection, str(address))
        info = self.engine.get_entity(address.entity)
        if info.kind == "topic":
            raise InvalidOperation(f"Cannot receive from topic '{info.path}': receive from one of its subscriptions.")
        mode = (
            ReceiveMode.RECEIVE_AND_DELETE if link.remote_snd_settle_mode == Link.SND_SETTLED else ReceiveMode.PEEK_LOCK
        )
        session_id, wants_session = session_links.session_filter(link)
        if wants_session and address.sub_queue is SubQueue.NONE:
            if not info.requires_session:
                raise InvalidOperation(f"'{info.path}' does not require sessions: use a plain receiver.")
            self._accept_session(link, address, mode, session_id)
            return
        if info.requires_session and address.sub_queue is SubQueue.NONE:
            raise InvalidOperation(f"'{info.path}' requires sessions: use a session receiver.")
        self._open_feed(_Feed(link, address, mode))

    def _open_feed(self, feed: _Feed) -> None:
        feed.link.max_message_size = self.engine.max_message_bytes(feed.address.entity)
        feed.link.open()
        self.feeds[feed.link] = feed
        self._pump(feed)

    def _attach_intake(self, link: Receiver, address: Address) -> None:
        self._authorize(link.connection, str(address))
        if address.sub_queue is not SubQueue.NONE:
            raise InvalidOperation(f"Cannot send to '{address}': a dead-letter queue only receives.")
        info = self.engine.get_entity(address.entity)
        if info.kind == "subscription":
            raise InvalidOperation(f"Cannot send to subscription '{info.path}': send to its topic.")
        # Advertised on attach: SDKs size batches by it and refuse larger messages themselves;
        # the guard detaches a link whose delivery grows past it.
        link.max_message_size = self.engine.max_message_bytes(address.entity)
        link.open()
        link.flow(_CREDIT)
        self.intakes[link] = _Intake(link, address.entity)

    def _refuse(self, link: Link, failure: conditions.Failure) -> None:
        """Attach with a null terminus and detach at once with the error, as the broker does."""
        log.info("emulator: refused link %s: %s", link.name, failure.description)
        if link.is_sender:
            link.source.type = Terminus.UNSPECIFIED
        else:
            link.target.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = _condition(failure)
        link.close()

    def _authorize(self, connection: Connection, path: str) -> None:
        """AuthError unless a live token of this connection covers path (keyless too, as Azure)."""
        peer = self.peers.get(connection)
        # The whole address: a token for `q/$DeadLetterQueue` covers that sub-queue, not `q`.
        if peer is None or not cbs.authorized(peer.grants, path, self.clock()):
            raise AuthError(f"Unauthorized access to '{path}': put a valid token on $cbs first.")

    # ------------------------------------------------------------------ sessions

    def _accept_session(self, link: Sender, address: Address, mode: ReceiveMode, session_id: str | None) -> None:
        """Lock the named session for this link, or the next free one; with none free, the attach
        waits (unanswered) for one, up to the client's timeout."""
        holder = uuid.uuid4().hex
        try:
            got = self.engine.accept_session(address, session_id, holder)
        except NoSessionAvailable:
            wait_s = session_links.wait_seconds(link)
            deadline = time.monotonic() + wait_s
            self.waiting[link] = session_links.WaitingAttach(link, address, mode, holder, deadline, wait_s)
            return
        session_links.announce(link, got.session_id, got.locked_until)
        self._open_feed(_Feed(link, address, mode, got.session_id, holder))

    def _retry_waiting(self) -> None:
        """Answer waiting next-available attaches: with a session now free, or with the timeout."""
        for wait in list(self.waiting.values()):
            link = wait.link
            try:
                got = self.engine.accept_session(wait.address, None, wait.holder)
            except NoSessionAvailable:
                if time.monotonic() >= wait.deadline:
                    del self.waiting[link]
                    self._refuse(link, conditions.session_wait_timeout(wait.wait_s))
                continue
            except Exception as exc:
                del self.waiting[link]
                self._refuse(link, conditions.failure_of(exc))
                continue
            del self.waiting[link]
            session_links.announce(link, got.session_id, got.locked_until)
            self._open_feed(_Feed(link, wait.address, wait.mode, got.session_id, wait.holder))

    def _release_session(self, feed: _Feed) -> None:
        """A session receiver went away: its session is free for the next one at once."""
        if feed.session_id is None or feed.holder is None:
            return
        try:
            self.engine.release_session(feed.address, feed.session_id, feed.holder)
        except Exception as exc:  # the lock then simply lapses
            log.info("emulator: could not release session %r: %s", feed.session_id, exc)

    def _holder_of(self, connection: Connection, link_name: str | None) -> str | None:
        """The session holder token of this connection's receiver link named link_name."""
        for feed in self.feeds.values():
            if feed.link.connection == connection and feed.link.name == link_name:
                return feed.holder
        return None

    # ------------------------------------------------------------------ flow

    def on_link_flow(self, event: Event) -> None:
        link = _link(event)
        if isinstance(link, Sender):
            feed = self.feeds.get(link)
            if feed is not None:
                self._pump(feed)
            else:
                self._flush_replies(link)
            if link.drain_mode and link.credit > 0:
                link.drained()

    def _pump(self, feed: _Feed) -> None:
        """Send as many available messages as the link has credit for."""
        link = feed.link
        if not (link.state & Endpoint.LOCAL_ACTIVE and link.state & Endpoint.REMOTE_ACTIVE):
            return
        credit = link.credit
        if credit <= 0:
            return
        try:
            messages = self.engine.receive(
                feed.address, credit, mode=feed.mode, session_id=feed.session_id, holder=feed.holder
            )
        except TransientError:
            return  # the store is busy: the next tick tries again
        except Exception as exc:
            self.feeds.pop(link, None)
            self._release_session(feed)
            failure = conditions.failure_of(exc)
            link.condition = _condition(failure)
            link.close()
            return
        for m in messages:
            token = m.lock_token
            # The SDK reads the lock token from the delivery tag: uuid.UUID(bytes_le=tag).
            tag = uuid.UUID(token).bytes_le if token else uuid.uuid4().bytes_le
            delivery = _new_delivery(link, tag)
            link.send(codec.encode_message(m, delivery_count=m.delivery_count - 1, locked_until=m.locked_until))
            link.advance()
            if feed.mode is ReceiveMode.RECEIVE_AND_DELETE:
                delivery.settle()
            else:
                setattr(delivery, _TOKEN, token)
        if link.drain_mode and link.credit > 0:
            link.drained()

    def _wake(self, entity: EntityPath) -> None:
        """Pump the feeds that may see messages just sent to a queue or topic."""
        if self.waiting:
            self._retry_waiting()
        for feed in list(self.feeds.values()):
            if feed.address.entity.name == entity.name:
                self._pump(feed)

    # ------------------------------------------------------------------ deliveries

    def on_delivery(self, event: Event) -> None:
        link = _link(event)
        delivery = _delivery(event)
        if isinstance(link, Sender):
            self._settle_feed(link, delivery)
            return
        assert isinstance(link, Receiver)
        if delivery.aborted:
            delivery.settle()
            return
        if not delivery.readable or delivery.partial:
            return  # wait for the rest of a multi-frame message
        payload = link.recv(delivery.pending) or b""
        link.advance()
        if link in self.intakes:
            self._take(self.intakes[link], delivery, payload)
        elif link in self.requests:
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
            self._answer(self.requests[link], payload)
        else:
            delivery.update(Delivery.RELEASED)
            delivery.settle()
        self.top_up(link)

    @staticmethod
    def top_up(link: Receiver) -> None:
        """Give a client's sender its credit back once half of it is used."""
        if link.credit < _CREDIT // 2:
            link.flow(_CREDIT - link.credit)

    def _take(self, intake: _Intake, delivery: Delivery, payload: bytes) -> None:
        """Store a client's message (or batch) and accept it, or reject it with the reason."""
        try:
            messages = codec.decode_transfer(payload, _message_format(delivery))
            self.engine.send(intake.entity, messages)
        except MalformedMessage as exc:
            self._reject(delivery, conditions.Failure(conditions.DECODE, f"malformed message: {exc}", 400))
        except Exception as exc:
            self._reject(delivery, conditions.failure_of(exc))
        else:
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
            self._wake(intake.entity)

    @staticmethod
    def _reject(delivery: Delivery, failure: conditions.Failure) -> None:
        delivery.local.condition = _condition(failure)
        delivery.update(Delivery.REJECTED)
        delivery.settle()

    def _settle_feed(self, link: Sender, delivery: Delivery) -> None:
        """Apply a client's disposition of a locked message, then echo the outcome and settle."""
        if delivery.settled and delivery.local_state:
            return  # already answered
        state = delivery.remote_state
        token = getattr(delivery, _TOKEN, None)
        feed = self.feeds.get(link)
        if state not in (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED):
            if delivery.settled:
                delivery.settle()
            return
        if token is None or feed is None:
            delivery.settle()
            return
        remote = delivery.remote
        try:
            lost = self._apply(feed.address, token, state, remote)
        except Exception as exc:
            self._reject(delivery, conditions.failure_of(exc))
            return
        if lost:
            # A session's messages are locked by the session: Service Bus names that lock.
            held = feed.session_id
            self._reject(delivery, conditions.lock_lost() if held is None else conditions.session_lock_lost(held))
            return
        if state == Delivery.MODIFIED:
            delivery.local.failed = remote.failed
            delivery.local.undeliverable = remote.undeliverable
        delivery.update(state)
        delivery.settle()
        if state != Delivery.ACCEPTED:
            self._wake(feed.address.entity)

    def _apply(self, address: Address, token: str, state: int, remote: Any) -> list[str]:
        """The engine call for one outcome; returns the tokens whose lock was lost."""
        if state == Delivery.ACCEPTED:
            return self.engine.complete(address, [token])
        if state == Delivery.REJECTED:
            reason, description, extra = _dead_letter_details(remote.condition)
            return self.engine.dead_letter(address, [token], reason, description, extra or None)
        if state == Delivery.MODIFIED:
            # Any modified without undeliverable-here is an abandon, delivery-failed or not.
            properties = _modified_properties(remote)
            if remote.undeliverable:
                return self.engine.defer(address, [token], properties)
            return self.engine.abandon(address, [token], properties)
        # released: handed back unprocessed (what a closing receiver had buffered). Service Bus
        # does not count it as a delivery; the engine charges it once a message was released
        # MaxDeliveryCount times, so a client that only releases still dead-letters poison.
        return self.engine.release(address, [token])

    # ------------------------------------------------------------------ request / response

    def _answer(self, node: _Requests, payload: bytes) -> None:
        request = Message()
        try:
            request.decode(payload)
        except Exception:
            log.info("emulator: undecodable request on %s", node.node)
            return
        raw: dict[Any, Any] = dict(request.properties or {})
        props = {str(k): v for k, v in raw.items()}
        if node.address is None:
            reply = self._cbs_reply(node.link.connection, props, request.body)
        else:
            holder = self._holder_of(node.link.connection, as_text(props.get("associated-link-name")))
            reply = self._management_reply(node.address, props, request.body, holder)
        reply.correlation_id = request.id
        peer = self.peers.setdefault(node.link.connection, _Peer())
        link = peer.reply_link(request.reply_to, node.node)
        if link is None:  # a reply to nobody is dropped, never kept for later
            log.info("emulator: no reply link %r on %s: reply dropped", request.reply_to, node.node)
            return
        peer.outbox.setdefault(link, []).append(reply.encode())
        self._flush_replies(link)

    def _cbs_reply(self, connection: Connection, props: dict[str, Any], body: Any) -> Message:
        outcome = cbs.put_token(props, body, self.key, now=self.clock())
        if outcome.grant is not None:
            cbs.add_grant(self.peers.setdefault(connection, _Peer()).grants, outcome.grant, self.clock())
        # Service Bus types the status code as AMQP int; a strict client refuses a long.
        return Message(properties={"status-code": int32(outcome.status), "status-description": outcome.description})

    def _management_reply(self, address: Address, props: dict[str, Any], body: Any, holder: str | None) -> Message:
        operation = str(props.get("operation") or "")
        reply = management.handle(self.engine, address, operation, body, holder=holder)
        # Operations that changed messages may have made some available to receivers.
        if operation in (management.UPDATE_DISPOSITION, management.SCHEDULE):
            self._wake(address.entity)
        return management.to_message(reply)

    def _flush_replies(self, link: Sender) -> None:
        peer = self.peers.get(link.connection)
        queue = peer.outbox.get(link) if peer is not None else None
        while queue and link.credit > 0:
            delivery = _new_delivery(link, next(self._tags).to_bytes(8, "big"))
            link.send(queue.pop(0))
            link.advance()
            delivery.settle()


def _modified_properties(remote: Any) -> dict[str, Any] | None:
    """Properties to modify that a `modified` outcome carries in its message annotations."""
    notes = remote.annotations
    if not notes:
        return None
    return {str(k): to_plain(v) for k, v in dict(notes).items()}


def _dead_letter_details(condition: Condition | None) -> tuple[str | None, str | None, dict[str, Any]]:
    """DeadLetterReason, DeadLetterErrorDescription, and the info map's other keys (as properties)."""
    if condition is None:
        return None, None, {}
    raw = condition.info if isinstance(condition.info, dict) else {}
    info = {str(k): to_plain(v) for k, v in raw.items()}
    reason = as_text(info.pop("DeadLetterReason", None))
    description = as_text(info.pop("DeadLetterErrorDescription", None))
    if condition.name != conditions.DEAD_LETTER and reason is None:
        # A plain reject: keep the client's condition as the reason, as the broker does.
        reason, description = condition.name, condition.description
    return reason, description, info
