"""`emulator serve --tls` through the unmodified azure-servicebus SDK, trusting only the local CA.

The data-plane client is built the way an app builds it for Service Bus: a namespace and an
`AzureNamedKeyCredential`, no `UseDevelopmentEmulator`; the admin client from a connection
string without it, so it speaks HTTPS. The only emulator-specific thing either is given is
the CA file (`connection_verify`). Ports are free ones: the AMQP client reaches a port other
than 5671 through its public `custom_endpoint_address` (it ignores a port in the namespace
when it uses TLS); the one test that needs 5671 itself takes a lock across xdist workers.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

from azure.core.credentials import AzureNamedKeyCredential
from azure.core.exceptions import ResourceNotFoundError, ServiceRequestError
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue, TransportType
from azure.servicebus.exceptions import ServiceBusConnectionError
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)
from support.sdk import WAIT, bodies, drain
from support.serve import AMQPS_PORT, Emulator, amqps_port, finish, start

from sbdlq.addresses import parse_address
from sbdlq.emulator.tls import TlsFiles, local_files

KEY = "tls-test-key"
KEY_NAME = "RootManageSharedAccessKey"


class TlsEmulator:
    """A keyed emulator serving AMQPS on a free port and HTTPS on its admin port."""

    def __init__(self, store: Path, tls_dir: Path, *, tls_port: int = 0, **options: Any) -> None:
        self.files: TlsFiles = local_files(tls_dir)
        ports: list[int] = []
        self.emulator: Emulator = start(
            store, key=KEY, tls=self.files, tls_port=tls_port, tls_ready=ports.append, **options
        )
        self.tls_port = ports[0]

    @property
    def ca(self) -> str:
        return str(self.files.ca)

    def client(self, **kwargs: Any) -> ServiceBusClient:
        """The SDK's namespace + named-key constructor, dialling the AMQPS port with TLS verified."""
        return ServiceBusClient(
            "localhost",
            AzureNamedKeyCredential(KEY_NAME, KEY),
            custom_endpoint_address=f"sb://localhost:{self.tls_port}",
            transport_type=TransportType.Amqp,  # the custom endpoint would default to WebSockets
            connection_verify=self.ca,
            retry_total=0,
            keep_alive=None,
            **kwargs,
        )

    def admin(self, **kwargs: Any) -> ServiceBusAdministrationClient:
        """The admin client over HTTPS on the admin port (no UseDevelopmentEmulator: https)."""
        conn = (
            f"Endpoint=sb://localhost:{self.emulator.http_port}/;SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY}"
        )
        kwargs.setdefault("connection_verify", self.ca)
        return ServiceBusAdministrationClient.from_connection_string(conn, retry_total=0, **kwargs)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEmulator]:
    served = TlsEmulator(tmp_path_factory.mktemp("tls") / "emulator.db", tmp_path_factory.mktemp("tls-state"))
    yield served
    finish(served.emulator)


# ---------------------------------------------------------------------- data plane


def test_send_receive_and_settle_through_tls_with_a_named_key(tls: TlsEmulator) -> None:
    q = tls.emulator.queue()
    with tls.client() as sb:
        with sb.get_queue_sender(q) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(4)])
        with sb.get_queue_receiver(q, max_wait_time=WAIT) as receiver:
            got = drain(receiver, 4)
            assert bodies(got) == ["m0", "m1", "m2", "m3"]
            receiver.complete_message(got[0])
            receiver.abandon_message(got[1])
            receiver.dead_letter_message(got[2], reason="Poison", error_description="bad")
            receiver.defer_message(got[3])
            deferred = receiver.receive_deferred_messages([got[3].sequence_number])
            receiver.complete_message(deferred[0])
            again = drain(receiver, 1)
            assert bodies(again) == ["m1"] and again[0].delivery_count == 1
            receiver.complete_message(again[0])
        with sb.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=WAIT) as dlq:
            (dead,) = drain(dlq, 1)
            assert str(dead) == "m2" and dead.dead_letter_reason == "Poison"
            dlq.complete_message(dead)
    assert tls.emulator.engine.counts(q).active == 0


def test_sessions_through_tls(tls: TlsEmulator) -> None:
    q = tls.emulator.queue(requires_session=True)
    with tls.client() as sb:
        with sb.get_queue_sender(q) as sender:
            sender.send_messages([ServiceBusMessage(f"{s}{i}", session_id=s) for s in "AB" for i in (1, 2)])
        with sb.get_queue_receiver(q, session_id="B", max_wait_time=WAIT) as receiver:
            receiver.session.set_state(b"half-way")
            got = drain(receiver, 2)
            assert bodies(got) == ["B1", "B2"]
            for m in got:
                receiver.complete_message(m)
            assert receiver.session.get_state() == b"half-way"
    counts = tls.emulator.engine.counts(q)
    assert counts.active == 2  # session A untouched


def test_a_client_that_does_not_trust_the_ca_is_refused(tls: TlsEmulator) -> None:
    q = tls.emulator.queue()
    # The SDK's default trust (certifi) does not know the local CA: the handshake fails.
    sb = ServiceBusClient(
        "localhost",
        AzureNamedKeyCredential(KEY_NAME, KEY),
        custom_endpoint_address=f"sb://localhost:{tls.tls_port}",
        transport_type=TransportType.Amqp,
        retry_total=0,
        keep_alive=None,
    )
    with sb, pytest.raises(ServiceBusConnectionError), sb.get_queue_sender(q) as sender:
        sender.send_messages(ServiceBusMessage("never"))
    with pytest.raises(ServiceRequestError):
        tls.admin(connection_verify=True).get_queue(q)


def test_the_plain_port_still_serves_development_emulator_clients(tls: TlsEmulator) -> None:
    q = tls.emulator.queue()
    plain = ServiceBusClient.from_connection_string(tls.emulator.conn_str(), retry_total=0, keep_alive=None)
    with plain, plain.get_queue_sender(q) as sender:
        sender.send_messages(ServiceBusMessage("plain"))
    assert tls.emulator.engine.counts(q).active == 1


def _closed(sock: socket.socket) -> bool:
    """Whether the server closes the connection (a TLS alert may come first) before the socket's timeout."""
    try:
        while sock.recv(1024):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_a_client_that_never_finishes_the_handshake_is_dropped(tmp_path: Path) -> None:
    from sbdlq.emulator.amqp.limits import Limits

    limits = Limits(auth_timeout_s=0.5, http_timeout_s=0.5)
    served = TlsEmulator(tmp_path / "e.db", tmp_path / "state", limits=limits)
    try:
        for port in (served.tls_port, served.emulator.http_port):
            # Silent, then plain AMQP bytes where TLS is spoken: each connection is closed, not held.
            for greeting in (b"", b"AMQP\x00\x01\x00\x00"):
                with socket.create_connection(("127.0.0.1", port)) as sock:
                    sock.sendall(greeting)
                    sock.settimeout(20 * limits.auth_timeout_s)  # far past the deadline: closed by then
                    assert _closed(sock), (port, greeting)
        with served.client() as sb, sb.get_queue_sender(served.emulator.queue()) as sender:
            sender.send_messages(ServiceBusMessage("still serving"))
    finally:
        finish(served.emulator)


# ---------------------------------------------------------------------- admin over HTTPS


def test_admin_client_creates_reads_updates_and_deletes_queues_over_https(tls: TlsEmulator) -> None:
    with tls.admin() as admin:
        created = admin.create_queue("tls-admin-q", max_delivery_count=7)
        assert created.max_delivery_count == 7
        queue = admin.get_queue("tls-admin-q")
        queue.max_delivery_count = 3
        admin.update_queue(queue)
        assert admin.get_queue("tls-admin-q").max_delivery_count == 3
        assert "tls-admin-q" in [q.name for q in admin.list_queues()]
        assert admin.get_queue_runtime_properties("tls-admin-q").active_message_count == 0
        admin.delete_queue("tls-admin-q")
        with pytest.raises(ResourceNotFoundError):
            admin.get_queue("tls-admin-q")


def test_admin_client_manages_topics_subscriptions_and_rules_over_https(tls: TlsEmulator) -> None:
    with tls.admin() as admin:
        admin.create_topic("tls-admin-t")
        assert admin.get_topic("tls-admin-t").name == "tls-admin-t"
        admin.create_subscription("tls-admin-t", "audit", max_delivery_count=4)
        sub = admin.get_subscription("tls-admin-t", "audit")
        sub.max_delivery_count = 9
        admin.update_subscription("tls-admin-t", sub)
        assert admin.get_subscription("tls-admin-t", "audit").max_delivery_count == 9
        admin.create_rule("tls-admin-t", "audit", "eu", filter=SqlRuleFilter("region = 'eu'"))
        admin.create_rule(
            "tls-admin-t",
            "audit",
            "orders",
            filter=CorrelationRuleFilter(label="order"),
            action=SqlRuleAction("SET routed = 1"),
        )
        rule = admin.get_rule("tls-admin-t", "audit", "eu")
        assert isinstance(rule.filter, SqlRuleFilter) and rule.filter.sql_expression == "region = 'eu'"
        rule.filter = SqlRuleFilter("region = 'us'")
        admin.update_rule("tls-admin-t", "audit", rule)
        assert admin.get_rule("tls-admin-t", "audit", "eu").filter.sql_expression == "region = 'us'"
        names = {r.name for r in admin.list_rules("tls-admin-t", "audit")}
        assert {"eu", "orders"} <= names
        admin.delete_rule("tls-admin-t", "audit", "orders")
        assert "orders" not in {r.name for r in admin.list_rules("tls-admin-t", "audit")}
        admin.delete_subscription("tls-admin-t", "audit")
        admin.delete_topic("tls-admin-t")
        with pytest.raises(ResourceNotFoundError):
            admin.get_topic("tls-admin-t")


# ---------------------------------------------------------------------- the real 5671


@contextlib.contextmanager
def _on_5671(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEmulator]:
    """A TLS emulator on 5671 itself, one test at a time; skipped when something else holds the port."""
    with amqps_port(tmp_path_factory.getbasetemp().parent) as taken:
        if taken is not None:
            pytest.skip(taken)
        served = TlsEmulator(tmp_path / "emulator.db", tmp_path / "state", tls_port=AMQPS_PORT)
        try:
            yield served
        finally:
            finish(served.emulator)


def test_a_bare_namespace_reaches_amqps_on_5671(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    # The SDK's own default: namespace "localhost", TLS, port 5671; only the CA is given.
    with _on_5671(tmp_path, tmp_path_factory) as served:
        q = served.emulator.queue()
        credential = AzureNamedKeyCredential(KEY_NAME, KEY)
        with ServiceBusClient("localhost", credential, connection_verify=served.ca, keep_alive=None) as sb:
            with sb.get_queue_sender(q) as sender:
                sender.send_messages(ServiceBusMessage("on 5671"))
            with sb.get_queue_receiver(q, max_wait_time=WAIT) as receiver:
                (got,) = drain(receiver, 1)
                receiver.complete_message(got)
    assert str(got) == "on 5671"


_OLD_SDK = "7.12.2"  # always TLS: it never reached the plain port
_OLD_CLIENT = """
import sys
import time
import azure.servicebus as sb
from azure.core.credentials import AzureNamedKeyCredential
queue, session_queue, ca, key = sys.argv[1:]
credential = AzureNamedKeyCredential("RootManageSharedAccessKey", key)
with sb.ServiceBusClient("localhost", credential, connection_verify=ca) as client:
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([sb.ServiceBusMessage("old-1"), sb.ServiceBusMessage("old-2")])
    with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
        got = []
        while len(got) < 2:
            got += receiver.receive_messages(max_message_count=2, max_wait_time=5)
        receiver.complete_message(got[0])
        receiver.dead_letter_message(got[1], reason="old")
    with client.get_queue_sender(session_queue) as sender:
        sender.send_messages(sb.ServiceBusMessage("s-1", session_id="S"))
    with client.get_queue_receiver(session_queue, session_id="S", max_wait_time=5) as receiver:
        (message,) = receiver.receive_messages(max_wait_time=5)
        receiver.complete_message(message)
print(sb.__version__, [str(m) for m in got], str(message))
"""


def _old_sdk(cache: Path) -> Path:
    """azure-servicebus 7.12.2 alone (no dependencies) in a folder of its own, installed once."""
    target = cache / f"site-azure-servicebus-{_OLD_SDK}"
    if not (target / "azure" / "servicebus").is_dir():
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
        done = subprocess.run([*cmd, f"azure-servicebus=={_OLD_SDK}"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot install azure-servicebus {_OLD_SDK}: {(done.stderr or done.stdout).strip()[-200:]}")
    return target


@pytest.mark.slow
def test_an_sdk_release_that_always_uses_tls_reaches_5671(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Issue 27 item 8: azure-servicebus 7.12 and 7.13 never speak plain AMQP.
    from sdk_samples import CACHE

    site = _old_sdk(CACHE)
    with _on_5671(tmp_path, tmp_path_factory) as served:
        queue, session_queue = served.emulator.queue(), served.emulator.queue(requires_session=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(
            [sys.executable, "-c", _OLD_CLIENT, queue, session_queue, served.ca, KEY],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split(" ", 1) == [_OLD_SDK, "['old-1', 'old-2'] s-1\n"]
        counts = served.emulator.engine.counts(queue)
        assert (counts.active, counts.dead_letter) == (0, 1)


def _one_string(port: int) -> str:
    return f"Endpoint=sb://localhost:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY}"


def test_the_amqps_port_answers_the_admin_client_over_https_too(tls: TlsEmulator) -> None:
    """The admin client dials HTTPS on the endpoint's port: naming the AMQPS port, it is served there."""
    string = _one_string(tls.tls_port)
    with ServiceBusAdministrationClient.from_connection_string(
        string, connection_verify=tls.ca, retry_total=0
    ) as admin:
        admin.create_queue("on-the-amqps-port")
        assert "on-the-amqps-port" in [q.name for q in admin.list_queues()]
        assert admin.get_queue_runtime_properties("on-the-amqps-port").active_message_count == 0
    with tls.client() as sb, sb.get_queue_sender("on-the-amqps-port") as sender:  # AMQPS still, on the same port
        sender.send_messages(ServiceBusMessage("beside https"))
    assert tls.emulator.engine.counts("on-the-amqps-port").active == 1


def test_one_connection_string_on_5671_serves_messaging_and_admin(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """docs/tls.md's one string under --tls: the SDK's messaging client and its admin client alike."""
    with _on_5671(tmp_path, tmp_path_factory) as served:
        string = _one_string(AMQPS_PORT)
        with ServiceBusAdministrationClient.from_connection_string(
            string, connection_verify=served.ca, retry_total=0
        ) as admin:
            admin.create_queue("one-string")
        with ServiceBusClient.from_connection_string(string, connection_verify=served.ca, keep_alive=None) as sb:
            with sb.get_queue_sender("one-string") as sender:
                sender.send_messages(ServiceBusMessage("one string"))
            with sb.get_queue_receiver("one-string", max_wait_time=WAIT) as receiver:
                (got,) = drain(receiver, 1)
                receiver.complete_message(got)
    assert str(got) == "one string"


def test_python_qpid_proton_over_amqps_on_the_port_that_also_answers_https(tls: TlsEmulator) -> None:
    """A bare AMQP 1.0 client over TLS (SASL PLAIN, key name and key): the sniffing hands it to the broker."""
    from proton import Message, SSLDomain
    from proton.utils import BlockingConnection

    q = tls.emulator.queue()
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(tls.ca)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    conn = BlockingConnection(
        f"amqps://localhost:{tls.tls_port}",
        ssl_domain=domain,
        sasl_enabled=True,
        allowed_mechs="PLAIN",
        user=KEY_NAME,
        password=KEY,
        timeout=60,
    )
    try:
        conn.create_sender(q).send(Message(body=b"from proton over tls", inferred=True))  # a data section
    finally:
        conn.close()
    (m,) = tls.emulator.engine.peek(parse_address(q), 0, 10)
    assert m.body == b"from proton over tls"


def _tls_socket(tls: TlsEmulator) -> Any:
    import ssl

    context = ssl.create_default_context(cafile=tls.ca)
    raw = socket.create_connection(("127.0.0.1", tls.tls_port), timeout=60)
    return context.wrap_socket(raw, server_hostname="localhost")


def _read_all(sock: Any) -> bytes:
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_an_http_request_line_split_across_writes_still_reaches_the_http_side(tls: TlsEmulator) -> None:
    with _tls_socket(tls) as sock:
        sock.sendall(b"GE")  # fewer bytes than it takes to tell: held until the rest comes
        time.sleep(0.2)
        sock.sendall(b"T /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200"), answer[:80]
    assert b'"status": "ok"' in answer


def test_bytes_that_are_neither_amqp_nor_http_go_to_the_broker_as_before(tls: TlsEmulator) -> None:
    with _tls_socket(tls) as sock:
        sock.sendall(b"HELLO, broker\r\n")
        answer = _read_all(sock)
    assert answer.startswith(b"AMQP"), answer[:80]  # proton's protocol header, then the close
