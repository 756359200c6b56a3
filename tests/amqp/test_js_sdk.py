"""The JavaScript SDK (@azure/service-bus under node) against serve: what issue 37 found it saw.

Skipped, with the reason, where node or npm is missing or npm cannot reach its registry
(support/node.py installs the SDK once into a cache folder).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.node import node_sdk, run_node
from support.serve import Emulator, finish, start

from sbdlq.addresses import parse_address

SEND_BATCH = """
const { ServiceBusClient } = require("@azure/service-bus");
const [conn, queue, count] = process.argv.slice(1);
(async () => {
  const client = new ServiceBusClient(conn, { retryOptions: { maxRetries: 0, timeoutInMs: 30000 } });
  const sender = client.createSender(queue);
  const batch = await sender.createMessageBatch();
  for (let i = 0; i < Number(count); i++) {
    const message = { body: `js-${i}`, messageId: `id-${i}`, applicationProperties: { n: i, stack: "node" } };
    if (!batch.tryAddMessage(message)) {
      throw new Error(`message ${i} did not fit`);
    }
  }
  await sender.sendMessages(batch);
  await sender.sendMessages([{ body: "array-0", applicationProperties: { a: 1 } }, { body: "array-1" }]);
  await client.close();
  console.log(JSON.stringify({ sent: batch.count + 2 }));
})().catch((err) => { console.error(err); process.exit(1); });
"""


@pytest.fixture(scope="session")
def js_sdk() -> Path:
    return node_sdk()


def test_js_batches_with_application_properties_arrive_as_their_messages(emulator: Any, js_sdk: Path) -> None:
    q = emulator.queue()
    assert run_node(js_sdk, SEND_BATCH, emulator.conn_str(), q, "50") == {"sent": 52}
    stored = emulator.engine.peek(parse_address(q), 0, 100)
    assert len(stored) == 52
    assert [m.message_id for m in stored[:50]] == [f"id-{i}" for i in range(50)]
    assert [m.application_properties for m in stored[:50]] == [{"n": i, "stack": "node"} for i in range(50)]
    assert [m.application_properties for m in stored[50:]] == [{"a": 1}, {}]
    assert [m.body for m in stored[:2]] == [b'"js-0"', b'"js-1"']  # the JS SDK sends a string as JSON data


LIST_NAMES = """
const { ServiceBusAdministrationClient } = require("@azure/service-bus");
const [conn, topic, sub] = process.argv.slice(1);
(async () => {
  const admin = new ServiceBusAdministrationClient(conn);
  const names = async (items, key) => { const out = []; for await (const x of items) out.push(x[key]); return out; };
  console.log(JSON.stringify({
    queues: await names(admin.listQueues(), "name"),
    topics: await names(admin.listTopics(), "name"),
    subscriptions: await names(admin.listSubscriptions(topic), "subscriptionName"),
    subscriptionTopics: await names(admin.listSubscriptions(topic), "topicName"),
    rules: await names(admin.listRules(topic, sub), "name"),
  }));
})().catch((err) => { console.error(err); process.exit(1); });
"""


@pytest.fixture(scope="module")
def tls_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """A private keyless emulator whose admin port speaks HTTPS (the JS admin client always does),
    with AMQPS on a free port (its number in `tls_ports`)."""
    from sbdlq.emulator.tls import local_files

    root = tmp_path_factory.mktemp("js-tls")
    ports: list[int] = []
    emu = start(root / "emulator.db", tls=local_files(root / "tls"), tls_port=0, tls_ready=ports.append)
    tls_ports[emu.store] = ports[0]
    yield emu
    finish(emu)


tls_ports: dict[str, int] = {}

SEND_RECEIVE = """
const { ServiceBusClient } = require("@azure/service-bus");
const [conn, queue] = process.argv.slice(1);
(async () => {
  const client = new ServiceBusClient(conn, { retryOptions: { maxRetries: 0, timeoutInMs: 30000 } });
  const sender = client.createSender(queue);
  await sender.sendMessages({ body: "over tls", applicationProperties: { stack: "node" } });
  const receiver = client.createReceiver(queue);
  const got = await receiver.receiveMessages(1, { maxWaitTimeInMs: 30000 });
  for (const m of got) await receiver.completeMessage(m);
  await client.close();
  console.log(JSON.stringify({ bodies: got.map((m) => m.body) }));
})().catch((err) => { console.error(err); process.exit(1); });
"""


def test_js_messaging_over_tls_with_the_endpoint_naming_the_amqps_port(tls_emulator: Emulator, js_sdk: Path) -> None:
    """Without UseDevelopmentEmulator the JS SDK dials AMQPS on the endpoint's port (5671 when
    it names none): docs/tls.md's Node.js row."""
    from sbdlq.emulator.tls import local_files

    emu = tls_emulator
    q = emu.queue()
    port = tls_ports[emu.store]
    conn = f"Endpoint=sb://localhost:{port}/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=k"
    ca = local_files(Path(emu.store).parent / "tls").ca
    assert run_node(js_sdk, SEND_RECEIVE, conn, q, ca=ca) == {"bodies": ["over tls"]}
    assert emu.engine.counts(q).active == 0


def test_js_admin_lists_entity_subscription_and_rule_names(tls_emulator: Emulator, js_sdk: Path) -> None:
    from sbdlq.emulator.engine import Rule
    from sbdlq.emulator.tls import local_files

    emu = tls_emulator
    queue = emu.queue()
    topic = emu.topic("audit", "billing")
    emu.engine.add_rule(f"{topic}/Subscriptions/audit", Rule("eu", sql="region = 'eu'"))
    conn = f"Endpoint=sb://localhost:{emu.http_port}/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=k"
    ca = local_files(Path(emu.store).parent / "tls").ca
    names = run_node(js_sdk, LIST_NAMES, conn, topic, "audit", ca=ca)
    assert queue in names["queues"] and "$Resources/Queues" not in names["queues"]
    assert topic in names["topics"]
    assert names["subscriptions"] == ["audit", "billing"]
    assert names["subscriptionTopics"] == [topic, topic]
    assert names["rules"] == ["$Default", "eu"]


def test_js_one_connection_string_for_messaging_and_admin(tls_emulator: Emulator, js_sdk: Path) -> None:
    """The endpoint naming the AMQPS port serves both: Node dials AMQPS and HTTPS on it (docs/tls.md's one string)."""
    from sbdlq.emulator.tls import local_files

    emu = tls_emulator
    q = emu.queue()
    topic = emu.topic("audit")
    conn = f"Endpoint=sb://localhost:{tls_ports[emu.store]}/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=k"
    ca = local_files(Path(emu.store).parent / "tls").ca
    names = run_node(js_sdk, LIST_NAMES, conn, topic, "audit", ca=ca)
    assert q in names["queues"] and names["subscriptions"] == ["audit"]
    assert run_node(js_sdk, SEND_RECEIVE, conn, q, ca=ca) == {"bodies": ["over tls"]}
    assert emu.engine.counts(q).active == 0
