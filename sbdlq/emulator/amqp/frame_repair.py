"""Repair of client transfer numbering that proton refuses, at the byte level.

azure-servicebus (pyamqp) numbers transfers from several threads without a lock: when
AutoLockRenewer renews two locks at once, two `$management` requests leave with the same
delivery-id (`session._outgoing_transfer` reads `next_outgoing_id` before either thread
increments it). AMQP 1.0 (2.7.5) says delivery-ids are sequential per session; proton
closes the connection on the duplicate (`amqp:session:invalid-field`, "sequencing error"),
while Service Bus tolerates it. So, before proton sees a frame, a new delivery whose id is
not the next one is given the next one; proton's later dispositions for such an id are
translated back to the id the client used, so the client still matches its outcome.

Inbound, only transfer frames are ever rewritten. The filter also notes each delivery's
message-format, which proton does not surface: a batch (0x80013700) is known by it, and the
broker asks `message_format` for it by link name and delivery tag. Outbound, receiver dispositions are
translated back, and every performative is written out in full (padding.py) for clients
that read frames by position.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from . import sasl
from .padding import Unparsed, written_out

log = logging.getLogger(__name__)

_ATTACH = 0x12
_TRANSFER = 0x14
_DETACH = 0x16
_DISPOSITION = 0x15
_BEGIN = 0x11
_END = 0x17
_MASK = 0xFFFFFFFF
#: the attribute a connection carries (set by the driver): the wire filter's `message_format`
MESSAGE_FORMAT = "sbdlq_message_format"
#: the attribute a connection carries (set by the driver): whether SASL PLAIN authorized it
PLAIN_AUTHORIZED = "sbdlq_plain_authorized"
_CLOSE_HEAD = b"\x00\x53\x18"
_END_HEAD = b"\x00\x53\x17"
_DISPOSITION_HEAD = b"\x00\x53\x15"
_ERROR_HEAD = b"\x00\x53\x1d"
# {"com.microsoft:tracking-id": "sbdlq"}: azure-servicebus reads error[2] and fails without it
_INFO = b"\xc1\x23\x02\xa3\x19com.microsoft:tracking-id\xa1\x05sbdlq"


def _uint_at(buf: bytes, pos: int) -> tuple[int | None, int]:
    """An AMQP uint (or null) at pos: its value and the position after it."""
    code = buf[pos]
    if code == 0x70:
        return struct.unpack_from(">I", buf, pos + 1)[0], pos + 5
    if code == 0x52:
        return buf[pos + 1], pos + 2
    if code == 0x43:
        return 0, pos + 1
    if code == 0x40:
        return None, pos + 1
    raise Unparsed(f"uint code {code:#x}")


def _bool_at(buf: bytes, pos: int) -> tuple[bool | None, int]:
    code = buf[pos]
    if code in (0x41, 0x42):
        return code == 0x41, pos + 1
    if code == 0x56:
        return buf[pos + 1] == 1, pos + 2
    if code == 0x40:
        return None, pos + 1
    raise Unparsed(f"bool code {code:#x}")


def _binary_at(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """An AMQP binary (or null) at pos: its bytes and the position after it."""
    code = buf[pos]
    if code == 0xA0:
        end = pos + 2 + buf[pos + 1]
        return bytes(buf[pos + 2 : end]), end
    if code == 0xB0:
        end = pos + 5 + struct.unpack_from(">I", buf, pos + 1)[0]
        return bytes(buf[pos + 5 : end]), end
    if code == 0x40:
        return None, pos + 1
    raise Unparsed(f"binary code {code:#x}")


def _string_at(buf: bytes, pos: int) -> str:
    """An AMQP string at pos (a link name)."""
    code = buf[pos]
    if code == 0xA1:
        return bytes(buf[pos + 2 : pos + 2 + buf[pos + 1]]).decode("utf-8", "replace")
    if code == 0xB1:
        size = struct.unpack_from(">I", buf, pos + 1)[0]
        return bytes(buf[pos + 5 : pos + 5 + size]).decode("utf-8", "replace")
    raise Unparsed(f"string code {code:#x}")


@dataclass(slots=True)
class _Performative:
    """Where a performative's list sits in a frame body, to read and rewrite its fields."""

    code: int
    list_at: int  # offset of the list constructor in the body
    wide: bool  # list32 rather than list8
    count: int
    first_field: int  # offset of the first field
    end: int  # offset after the list


def _performative(body: bytes) -> _Performative | None:
    if len(body) < 4 or body[0] != 0x00:
        return None
    if body[1] == 0x53:
        code, pos = body[2], 3
    elif body[1] == 0x80:
        code, pos = struct.unpack_from(">Q", body, 2)[0], 10
    else:
        return None
    kind = body[pos]
    if kind == 0x45:
        return _Performative(code, pos, False, 0, pos + 1, pos + 1)
    if kind == 0xC0:
        size, count = body[pos + 1], body[pos + 2]
        return _Performative(code, pos, False, count, pos + 3, pos + 2 + size)
    if kind == 0xD0:
        size, count = struct.unpack_from(">II", body, pos + 1)
        return _Performative(code, pos, True, count, pos + 9, pos + 5 + size)
    return None


def _with_field(body: bytes, perf: _Performative, start: int, stop: int, value: bytes) -> bytes:
    """The body with bytes [start, stop) of the performative replaced, list size fixed."""
    grown = len(value) - (stop - start)
    head = bytearray(body[:start])
    if perf.wide:
        size = struct.unpack_from(">I", head, perf.list_at + 1)[0]
        struct.pack_into(">I", head, perf.list_at + 1, size + grown)
    else:
        size = head[perf.list_at + 1] + grown
        if size > 0xFF:
            raise Unparsed("list8 overflow")
        head[perf.list_at + 1] = size
    return bytes(head) + value + body[stop:]


def _uint(value: int) -> bytes:
    return b"\x70" + struct.pack(">I", value & _MASK)


@dataclass
class _Session:
    """Per incoming channel: the delivery-id proton expects next, and open multi-frame deliveries."""

    next_id: int | None = None
    open_delivery: dict[int, int] = field(default_factory=dict)  # handle → id given to proton
    renamed: dict[int, int] = field(default_factory=dict)  # id given to proton → the client's id
    links: dict[int, str] = field(default_factory=dict)  # the client's link handle → the link's name


class _Frames:
    """Splits a byte stream into protocol headers and whole frames.

    A frame is held until it is whole, so one declared over `max_size` (what the listener
    advertises) is not held at all: from there on the stream passes through uninterpreted,
    and proton refuses the frame (framing error) after its first bytes, not after gigabytes.
    """

    def __init__(self, max_size: int | None = None) -> None:
        self.buf = bytearray()
        self.max_size = max_size
        self.passthrough = False

    def feed(self, data: bytes) -> list[bytes]:
        if self.passthrough:
            return [data]
        self.buf += data
        out: list[bytes] = []
        while True:
            if self.buf[:4] == b"AMQP":
                if len(self.buf) < 8:
                    break
                out.append(bytes(self.buf[:8]))
                del self.buf[:8]
                continue
            if len(self.buf) < 8:
                break
            size = struct.unpack_from(">I", self.buf, 0)[0]
            if size < 8 or (self.max_size is not None and size > self.max_size):
                # Not AMQP framing, or a frame proton refuses: stop interpreting, pass it all on.
                out.append(bytes(self.buf))
                self.buf.clear()
                self.passthrough = True
                break
            if len(self.buf) < size:
                break
            out.append(bytes(self.buf[:size]))
            del self.buf[:size]
        return out


class DeliveryIdRepair:
    """One connection's inbound/outbound byte filter (see the module docstring)."""

    def __init__(
        self, max_frame_size: int | None = None, check_plain: Callable[[str, str], bool] | None = None
    ) -> None:
        self._check_plain = check_plain
        self._plain_ok = False
        self._in = _Frames(max_frame_size)
        self._out = _Frames()
        self._sessions: dict[int, _Session] = {}
        self.repaired = 0
        # (link name, delivery tag) → message-format, for deliveries whose format is not 0,
        # until the broker takes them (proton does not surface the format). Tags are keyed
        # as proton hands them out: decoded as UTF-8.
        self._formats: dict[tuple[str, str], int] = {}

    def plain_authorized(self) -> bool:
        """Whether the client authenticated with a SASL PLAIN pair the listener took."""
        return self._plain_ok

    def message_format(self, link_name: str, tag: str) -> int:
        """The message-format the client's delivery `tag` on link `link_name` came with (taken once)."""
        return self._formats.pop((link_name, tag), 0)

    def inbound(self, data: bytes) -> bytes:
        """Client bytes for proton, with out-of-sequence delivery-ids renumbered."""
        return b"".join(self._inbound_frame(f) for f in self._in.feed(data))

    def outbound(self, data: bytes) -> bytes:
        """Proton's bytes for the client: dispositions for renumbered deliveries translated back,
        and an info map added to errors that close a session or connection without one."""
        return b"".join(self._outbound_frame(f) for f in self._out.feed(data))

    # ------------------------------------------------------------------ inbound

    def _inbound_frame(self, frame: bytes) -> bytes:
        if len(frame) < 8 or frame[:4] == b"AMQP" or frame[5] != 0:
            if len(frame) >= 8 and frame[:4] != b"AMQP" and frame[5] == 1:
                frame, plain = sasl.inbound(frame, self._check_plain)
                self._plain_ok = self._plain_ok or plain
            return frame
        doff = frame[4] * 4
        channel = struct.unpack_from(">H", frame, 6)[0]
        body = frame[doff:]
        perf = _performative(body)
        if perf is None:
            return frame
        if perf.code in (_BEGIN, _END):
            self._sessions.pop(channel, None)
            return frame
        if perf.code in (_ATTACH, _DETACH):
            self._note_link(self._sessions.setdefault(channel, _Session()), body, perf)
            return frame
        if perf.code != _TRANSFER:
            return frame
        try:
            new_body = self._transfer(self._sessions.setdefault(channel, _Session()), body, perf)
        except (Unparsed, IndexError, struct.error) as exc:
            log.debug("emulator: transfer frame passed through unparsed: %s", exc)
            return frame
        return _with_body(frame, doff, body, new_body)

    def _note_link(self, session: _Session, body: bytes, perf: _Performative) -> None:
        """Remember which link name an attach gives a handle (a detach frees it)."""
        try:
            if perf.code == _DETACH:
                handle, _ = _uint_at(body, perf.first_field)
                name = session.links.pop(handle or 0, None)
                if name is not None:
                    self._formats = {k: v for k, v in self._formats.items() if k[0] != name}
                return
            if perf.count >= 2:
                name = _string_at(body, perf.first_field)
                handle, _ = _uint_at(body, pos_after_string(body, perf.first_field))
                session.links[handle or 0] = name
        except (Unparsed, IndexError, struct.error) as exc:
            log.debug("emulator: attach frame not read: %s", exc)

    def _transfer(self, session: _Session, body: bytes, perf: _Performative) -> bytes:
        if perf.count < 2:
            raise Unparsed("transfer without delivery-id")
        handle, pos = _uint_at(body, perf.first_field)
        id_at = pos
        client_id, pos = _uint_at(body, pos)
        assert handle is not None
        more = False
        tag, message_format = None, None
        if perf.count >= 4:
            tag, pos = _binary_at(body, pos)
            message_format, pos = _uint_at(body, pos)
        if perf.count >= 6:
            _, pos = _bool_at(body, pos)  # settled
            more = bool(_bool_at(body, pos)[0])
        ongoing = session.open_delivery.get(handle)
        if ongoing is None and message_format and tag is not None and handle in session.links:
            self._formats[(session.links[handle], tag.decode("utf-8", "replace"))] = message_format
        if ongoing is not None:  # a continuation frame carries the first frame's id
            if not more:
                del session.open_delivery[handle]
            if client_id is None or client_id == ongoing:
                return body
            return _with_field(body, perf, id_at, pos_after(body, id_at), _uint(ongoing))
        expected = session.next_id if session.next_id is not None else client_id
        given = expected if expected is not None else 0
        session.next_id = (given + 1) & _MASK
        if more:
            session.open_delivery[handle] = given
        if client_id is None or client_id == given:
            return body
        session.renamed[given] = client_id
        self.repaired += 1
        log.info("emulator: client reused delivery-id %d; numbered it %d", client_id, given)
        return _with_field(body, perf, id_at, pos_after(body, id_at), _uint(given))

    # ------------------------------------------------------------------ outbound

    def _outbound_frame(self, frame: bytes) -> bytes:
        if len(frame) < 8 or frame[:4] == b"AMQP" or frame[5] not in (0, 1):
            return frame
        doff = frame[4] * 4
        frame = _written_out(frame, doff)
        if frame[5] != 0:
            return sasl.outbound(frame)  # MSSBCBS offered next to ANONYMOUS
        body = frame[doff:]
        if body[:3] in (_CLOSE_HEAD, _END_HEAD):
            return _with_error_info(frame, doff)
        session = self._sessions.get(struct.unpack_from(">H", frame, 6)[0])
        if session is None or not session.renamed or body[:3] != _DISPOSITION_HEAD:
            return frame
        perf = _performative(body)
        if perf is None:
            return frame
        try:
            return self._disposition(frame[:doff], body, perf, session)
        except (Unparsed, IndexError, struct.error) as exc:
            log.debug("emulator: disposition passed through unparsed: %s", exc)
            return frame

    def _disposition(self, header: bytes, body: bytes, perf: _Performative, session: _Session) -> bytes:
        role, pos = _bool_at(body, perf.first_field)
        if not role:  # our own deliveries: their ids are ours
            return header + body
        first_at = pos
        first, pos = _uint_at(body, pos)
        last_at = pos
        last, pos = _uint_at(body, pos) if perf.count >= 3 else (None, pos)
        settled = bool(_bool_at(body, pos)[0]) if perf.count >= 4 else False
        assert first is not None
        last = first if last is None else last
        ids = [(first + i) & _MASK for i in range(((last - first) & _MASK) + 1)]
        if not any(i in session.renamed for i in ids):
            return header + body
        frames = []
        for i in ids:  # one disposition per delivery: the client's ids need not be a range
            client = session.renamed.pop(i, i) if settled else session.renamed.get(i, i)
            one = _with_field(body, perf, first_at, pos_after(body, first_at), _uint(client))
            shift = len(one) - len(body)
            if perf.count >= 3:
                one = _with_field(one, perf, last_at + shift, pos_after(one, last_at + shift), _uint(client))
            frame_header = bytearray(header)
            struct.pack_into(">I", frame_header, 0, len(header) + len(one))
            frames.append(bytes(frame_header) + one)
        return b"".join(frames)


def _written_out(frame: bytes, doff: int) -> bytes:
    """The frame with its performative's fields all written out (padding.py), else unchanged."""
    body = frame[doff:]
    try:
        new_body = written_out(body)
    except (Unparsed, IndexError, struct.error) as exc:
        log.debug("emulator: outbound frame passed through unpadded: %s", exc)
        return frame
    return _with_body(frame, doff, body, new_body)


def _with_body(frame: bytes, doff: int, body: bytes, new_body: bytes) -> bytes:
    """The frame with its body replaced, its size fixed (the frame itself where nothing changed)."""
    if new_body is body:
        return frame
    header = bytearray(frame[:doff])
    struct.pack_into(">I", header, 0, doff + len(new_body))
    return bytes(header) + new_body


def _with_error_info(frame: bytes, doff: int) -> bytes:
    """A close or end frame whose error lacks the info field, with one added (else unchanged)."""
    body = frame[doff:]
    outer = _performative(body)
    if outer is None or outer.count < 1 or body[outer.first_field : outer.first_field + 3] != _ERROR_HEAD:
        return frame
    error_at = outer.first_field
    inner = _performative(body[error_at:])
    if inner is None or inner.count != 2:
        return frame
    error = bytearray(body[error_at : error_at + inner.end])
    if inner.wide:
        size = struct.unpack_from(">I", error, inner.list_at + 1)[0]
        struct.pack_into(">II", error, inner.list_at + 1, size + len(_INFO), 3)
    elif error[inner.list_at + 1] + len(_INFO) <= 0xFF:
        error[inner.list_at + 1] += len(_INFO)
        error[inner.list_at + 2] = 3
    else:
        return frame
    error += _INFO
    try:
        new_body = _with_field(body, outer, error_at, error_at + inner.end, bytes(error))
    except Unparsed:
        return frame
    return _with_body(frame, doff, body, new_body)


def pos_after_string(buf: bytes, pos: int) -> int:
    """The position after the string at pos."""
    if buf[pos] == 0xA1:
        return pos + 2 + buf[pos + 1]
    if buf[pos] == 0xB1:
        return pos + 5 + struct.unpack_from(">I", buf, pos + 1)[0]
    raise Unparsed(f"string code {buf[pos]:#x}")


def pos_after(buf: bytes, pos: int) -> int:
    """The position after the uint (or null) at pos."""
    return _uint_at(buf, pos)[1]
