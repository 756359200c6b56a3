"""Hostile wire inputs against a real `sbdlq emulator serve` process (next to the bad-input table).

Each row attacks the listener the way an unauthenticated or careless client can: pre-auth
floods, oversized frames, expired tokens, idle and surplus connections, slowloris HTTP.
After each one the server must still be up (a fresh client is served, /health answers), its
memory bounded (RSS from /proc), and the store consistent (counts unchanged, integrity ok).
The server runs with a short auth timeout and a small connection cap so every row ends by
itself within seconds; everything is on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import sqlite3
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

import raw_amqp

from sbdlq.emulator.amqp import sas
from sbdlq.emulator.amqp.limits import HTTP_TIMEOUT_S, Limits
from sbdlq.emulator.engine import Engine
from sbdlq.models import OutboundMessage

KEY = "hostile-wire-key"
AUTH_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 40
RSS_GROWTH_MAX_KB = 96 * 1024  # generous: an unbounded buffer grows by gigabytes
#: How long a step may wait for something that must happen (a hang guard, not a speed bound).
GUARD_S = 60.0


@dataclass
class Server:
    proc: subprocess.Popen[str]
    store: Path
    amqp: int
    http: int

    def rss_kb(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1))  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the server's memory")
    root = tmp_path_factory.mktemp("hostile")
    store, key_file = root / "store.db", root / "key"
    key_file.write_text(KEY + "\n")
    with Engine(store) as engine:
        engine.create_queue("orders")
        engine.send("orders", [OutboundMessage(body=f"m{i}".encode()) for i in range(5)])
    cmd = [sys.executable, "-m", "sbdlq", "--emulator", str(store), "emulator", "serve", "--port", "0"]
    cmd += ["--http-port", "0", "--key-file", str(key_file), "--auth-timeout", str(AUTH_TIMEOUT_S)]
    cmd += ["--max-connections", str(MAX_CONNECTIONS)]
    env = {**os.environ, "SBDLQ_CONFIG": str(root / "none.yaml")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.fullmatch(r"listening on amqp://127\.0\.0\.1:(\d+) \(http 127\.0\.0\.1:(\d+)\)\n", line)
        assert found, line + (proc.stderr.read() if proc.stderr else "")
        yield Server(proc, store, int(found.group(1)), int(found.group(2)))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=GUARD_S)
    assert KEY not in err
    assert "Traceback" not in err, err[-2000:]


def _health(server: Server, timeout: float = GUARD_S) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http}/health", timeout=timeout) as resp:
        return dict(json.loads(resp.read()))


def _served(server: Server) -> bool:
    """Whether a new client completes SASL and gets the server's open frame (False: closed on it)."""
    with raw_amqp.connect(server.amqp) as sock:
        sock.sendall(raw_amqp.sasl_anonymous() + raw_amqp.open_session())
        return b"sbdlq-emulator" in raw_amqp.wait_for(sock, b"sbdlq-emulator")


def _fresh_client_is_served(server: Server) -> None:
    """A new client completes SASL and gets the server's open frame."""
    assert _served(server)


def _store_state(server: Server) -> tuple[int, int]:
    with Engine(server.store) as engine:
        counts = engine.counts("orders")
    with sqlite3.connect(server.store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    return counts.active, counts.dead_letter


# ---------------------------------------------------------------------- the attacks


def flood_cbs_before_auth(server: Server) -> None:
    """One endless delivery onto $cbs, obeying flow control: refused at 64 KB, not buffered."""
    answer = raw_amqp.cbs_flood(server.amqp, 20_000_000)
    assert b"amqp:link:message-size-exceeded" in answer


def flood_ignoring_the_window(server: Server) -> None:
    """The same flood pipelined before the session is answered: the connection is closed."""
    answer = raw_amqp.cbs_flood(server.amqp, 20_000_000, polite=False)
    assert b"message-size-exceeded" in answer or b"window-violation" in answer or len(answer) < 4096


def oversized_frame(server: Server) -> None:
    """A single 1 MB frame (the listener advertises 64 KB): framing error, connection closed."""
    with raw_amqp.connect(server.amqp) as sock:
        sock.sendall(raw_amqp.sasl_anonymous() + raw_amqp.open_session() + raw_amqp.attach_sender("$cbs"))
        raw_amqp.wait_for(sock, b"$cbs")
        try:
            sock.sendall(raw_amqp.transfer(b"z" * 1_000_000))
        except OSError:
            pass
        assert b"framing-error" in raw_amqp.wait_for(sock, b"framing-error")


def endless_frame(server: Server) -> None:
    """A frame declaring 2 GB, then streamed: refused at the frame limit, never buffered whole.

    The delivery-id filter in front of proton collected whole frames, so it buffered this one
    (200 MB in, RSS with it) before proton could apply its 64 KB limit.
    """
    with raw_amqp.connect(server.amqp) as sock:
        sock.sendall(raw_amqp.sasl_anonymous() + raw_amqp.open_session())
        raw_amqp.wait_for(sock, b"sbdlq-emulator")
        sock.sendall(struct.pack(">IBBH", 0x7FFFFFFF, 2, 0, 0))
        chunk = b"\0" * (1 << 20)
        try:
            for _ in range(200):
                sock.sendall(chunk)
        except OSError:
            pass  # closed on the framing error: what should happen


def idle_connections(server: Server) -> None:
    """Connections that send only the SASL header are closed after the auth timeout."""
    socks = [raw_amqp.connect(server.amqp) for _ in range(MAX_CONNECTIONS // 2)]
    try:
        for sock in socks:
            sock.sendall(raw_amqp.SASL_HEADER)
        for sock in socks:
            sock.settimeout(GUARD_S)  # a hang guard: nothing but the auth timeout closes them
            while sock.recv(4096):  # b'' once the server closed it
                pass
    finally:
        for sock in socks:
            sock.close()


def connection_flood(server: Server) -> None:
    """More connections than --max-connections: the surplus is closed (and the server serves again after)."""
    socks = []
    try:
        for _ in range(MAX_CONNECTIONS + 20):
            socks.append(raw_amqp.connect(server.amqp))
        surplus = socks[-1]
        surplus.settimeout(GUARD_S)
        assert surplus.recv(1) == b""
    finally:
        for sock in socks:
            sock.close()
    # The server notices the closes (or times them out) in its own time: wait until it serves again.
    deadline = time.monotonic() + GUARD_S
    while not _served(server):
        assert time.monotonic() < deadline, "the server did not serve again after the flood"
        time.sleep(0.05)  # a polling interval, not a guess at how long the server takes


def _put_token(conn: Any, resource: str, expiry: int) -> int:
    """Put a token for `resource` valid until `expiry` (epoch seconds) on `$cbs`; the status code."""
    from proton import Message

    token = f"{sas.PREFIX}sr={resource}&sig={sas.sign(resource, KEY, expiry)}&se={expiry}&skn=root"
    replies = conn.create_receiver("$cbs")
    conn.create_sender("$cbs").send(
        Message(body=token.replace("+", "%2B"), reply_to="$cbs", properties={"operation": "put-token"})
    )
    return int(replies.receive(timeout=GUARD_S).properties["status-code"])


def expired_token(server: Server) -> None:
    """A short-lived token: its link is detached when it expires, new links refused."""
    from proton import Endpoint
    from proton.utils import BlockingConnection, LinkDetached

    resource = f"sb://127.0.0.1:{server.amqp}/orders"
    # `se` is whole seconds, so the token must live long enough to connect, put it and attach;
    # on a machine too busy for that, try again with a longer life (the test then waits longer).
    for life in (4, 8, 16, 32):
        expiry = int(time.time()) + life
        conn = BlockingConnection(
            f"amqp://127.0.0.1:{server.amqp}", timeout=GUARD_S, sasl_enabled=True, allowed_mechs="ANONYMOUS"
        )
        try:
            if _put_token(conn, resource, expiry) == 202:
                sender = conn.create_sender("orders")  # authorized now
                break
        except LinkDetached:
            pass  # the token expired before the attach
        conn.close()
    else:
        raise AssertionError("no token lived long enough to attach with")
    try:
        # The server detaches the link on its first tick past `se`: wait for the detach itself
        # (the connection reports it as LinkDetached; a timeout means it never came).
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            conn.wait(lambda: bool(sender.link.state & Endpoint.REMOTE_CLOSED), timeout=life + GUARD_S)
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            conn.create_sender("orders", name="after-expiry")
    finally:
        conn.close()


def slowloris_http(server: Server) -> None:
    """Half-sent HTTP requests do not hold /health (threads, read timeouts)."""
    socks = [socket.create_connection(("127.0.0.1", server.http), timeout=GUARD_S) for _ in range(20)]
    try:
        for sock in socks:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finishes the headers
        # Answered while they wait: a listener that served them first would answer only once
        # they timed out (HTTP_TIMEOUT_S each), after this wait gave up.
        assert _health(server, timeout=HTTP_TIMEOUT_S)["status"] == "ok"
    finally:
        for sock in socks:
            sock.close()


def _refused(port: int, path: str) -> bool:
    """Whether the HTTP side closed a request without an answer (an HTTP error is an answer)."""
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3).close()
    except urllib.error.HTTPError:
        return False
    except (urllib.error.URLError, ConnectionError, http.client.RemoteDisconnected):
        return True
    return False


def bad_paging_http(server: Server) -> None:
    """`?$skip=abc` is a 400 (not a dropped connection); the key is required either way."""
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{server.http}/$Resources/queues?$skip=abc", timeout=GUARD_S)
    except urllib.error.HTTPError as exc:
        assert exc.code in (400, 401)
    else:
        raise AssertionError("expected an HTTP error")


ATTACKS: list[Callable[[Server], None]] = [
    flood_cbs_before_auth,
    flood_ignoring_the_window,
    oversized_frame,
    endless_frame,
    idle_connections,
    connection_flood,
    expired_token,
    slowloris_http,
    bad_paging_http,
]


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.__name__ for a in ATTACKS])
def test_server_survives(server: Server, attack: Callable[[Server], None]) -> None:
    before_state = _store_state(server)
    before_rss = server.rss_kb()
    attack(server)
    assert server.proc.poll() is None, "the server died"
    assert _health(server)["status"] == "ok"
    assert "store" not in _health(server)  # keyed: the path is not shown
    _fresh_client_is_served(server)
    assert server.rss_kb() - before_rss < RSS_GROWTH_MAX_KB
    assert _store_state(server) == before_state


def test_health_answers_while_a_slowloris_holds_every_http_slot(tmp_path: Path) -> None:
    """Issue 24 #9: connections trickling header bytes held every HTTP slot, and /health was refused
    with the rest until they were cut. Now /health answers; anything else is still refused."""
    from sbdlq.emulator.amqp.http import HttpEndpoint

    store = tmp_path / "store.db"
    with Engine(store) as engine:
        engine.create_queue("orders")
    slots = 4  # the default is 64: the same, sooner
    limits = Limits(http_max_clients=slots, http_timeout_s=60)
    web = HttpEndpoint(str(store), host="127.0.0.1", port=0, key=KEY, amqp_port=5672, limits=limits)
    web.start()
    socks: list[socket.socket] = []
    try:
        for _ in range(slots + 6):
            sock = socket.create_connection(("127.0.0.1", web.port), timeout=3)
            sock.sendall(b"GET /$Resources/queues HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            socks.append(sock)
        # Once every slot is held (the listen backlog lets them in a few at a time), anything but a
        # health check is refused ...
        deadline = time.monotonic() + 30
        while not _refused(web.port, "/$Resources/queues"):
            assert time.monotonic() < deadline, "the trickling connections never held every slot"
            time.sleep(0.05)
        # ... and /health answers all the same, as often as asked.
        for _ in range(5):
            with urllib.request.urlopen(f"http://127.0.0.1:{web.port}/health", timeout=3) as resp:
                assert json.loads(resp.read()) == {"status": "ok", "amqp_port": 5672}
        assert _refused(web.port, "/$Resources/queues")
    finally:
        for sock in socks:
            sock.close()
        web.stop()


def test_a_keyless_health_check_past_the_slots_keeps_the_host_check(tmp_path: Path) -> None:
    """The overflow's /health answers as a slot's does: a foreign Host (DNS rebinding) gets 403."""
    from sbdlq.emulator.amqp.http import HttpEndpoint

    store = tmp_path / "store.db"
    Engine(store).close()
    one_slot = Limits(http_max_clients=1)
    web = HttpEndpoint(str(store), host="127.0.0.1", port=0, key=None, amqp_port=5672, limits=one_slot)
    web.start()
    hold = socket.create_connection(("127.0.0.1", web.port), timeout=3)
    try:
        hold.sendall(b"GET /x HTTP/1.1\r\n")  # holds the one slot
        deadline = time.monotonic() + 30
        while not _refused(web.port, "/$Resources/queues"):
            assert time.monotonic() < deadline, "the slot was never held"
            time.sleep(0.05)
        replies = []
        for host in ("evil.example", f"127.0.0.1:{web.port}"):
            with socket.create_connection(("127.0.0.1", web.port), timeout=3) as sock:
                sock.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                replies.append(sock.recv(4096).split(b"\r\n", 1)[0])
        assert replies == [b"HTTP/1.1 403 Forbidden", b"HTTP/1.1 200 OK"]
    finally:
        hold.close()
        web.stop()
