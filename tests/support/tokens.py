"""A `$cbs` put-token for clients that are not the Service Bus SDK (bare python-qpid-proton).

`emulator serve` refuses every link of a connection without a token, keyless or not, as
Service Bus does; the SDKs put one by themselves, a bare client must do it as here.
"""

from __future__ import annotations

import uuid
from typing import Any

#: a well-formed SAS token for the whole namespace, good until 2286: what a keyless listener takes
ANY_TOKEN = "SharedAccessSignature sr=sb%3A%2F%2Flocalhost%2F&sig=any&se=9999999999&skn=RootManageSharedAccessKey"


def put_token(conn: Any, token: str = ANY_TOKEN, audience: str = "sb://localhost/") -> int:
    """Put a token on `$cbs` over a proton BlockingConnection; the reply's status code."""
    from proton import Message

    name = f"cbs-reply-{uuid.uuid4()}"
    replies = conn.create_receiver("$cbs", name=name, credit=1)
    sender = conn.create_sender("$cbs")
    properties = {"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience}
    sender.send(Message(id=uuid.uuid4(), reply_to=name, properties=properties, body=token))
    reply = replies.receive(timeout=30)
    sender.close()
    replies.close()
    return int(reply.properties["status-code"])


def bare_connection(port: int, token: str = ANY_TOKEN) -> Any:
    """A python-qpid-proton BlockingConnection (SASL ANONYMOUS) that has put a token."""
    from proton.utils import BlockingConnection

    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", sasl_enabled=True, allowed_mechs="ANONYMOUS")
    try:
        status = put_token(conn, token)
        assert status in (200, 202), f"put-token answered {status}"
    except BaseException:
        conn.close()
        raise
    return conn
