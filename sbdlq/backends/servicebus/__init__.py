"""Backend over Azure Service Bus: azure-servicebus (aio) for AMQP, its admin client for counts.

One module per job:

- backend.py      ServiceBusBackend: the Backend primitives, cached senders/receivers, held locks
- senders.py      the cached senders: opening retried by sbdlq, a send never repeated
- links.py        the cached receive handlers, the locked messages they hold, settlement runs
- admin_endpoint.py  the management (HTTP) endpoint: entity properties, runtime counts, fallback
- peek_counts.py  counts by peeking every message, where the admin endpoint is out of reach
- conversion.py   SDK messages and entity descriptions ↔ sbdlq models
- errors.py       SDK / AMQP / azure-core errors → sbdlq.errors, at the edge
- credentials.py  azure-identity credentials, bridged between sync and async
- clients.py      namespace names, connection string, client and admin HTTP transport set-up
- sdk_compat.py   every access to a private SDK attribute, and the SDK versions it was checked on
- shortcuts.py    whether those shortcuts are taken (SBDLQ_SDK_SHORTCUTS, the tested releases)
- lock_renewal.py  lock renewal per receiver and per message
- settlement.py   settling in runs, and what a refused or unanswered run leaves
- amqp_body.py    amqp-value and amqp-sequence bodies in pure Python
- scheduling.py   a schedule of many messages cut into the SDK's schedule requests

Importing the package imports no azure module: each is imported where it is used.
"""

from sbdlq.backends.servicebus.backend import ServiceBusBackend
from sbdlq.backends.servicebus.clients import (
    ADMIN_EMULATOR_PORT,
    SOCKET_TIMEOUT_S,
    admin_client_kwargs,
    admin_http_url,
    admin_transport,
    amqp_client_kwargs,
    normalize_namespace,
    plain_http_transport_class,
    sdk_connection_string,
)
from sbdlq.backends.servicebus.conversion import (
    from_sdk_message,
    queue_info,
    subscription_info,
    to_sdk_message,
    topic_info,
)
from sbdlq.backends.servicebus.errors import translate_error
from sbdlq.backends.servicebus.settlement import PEEK_PAGE

__all__ = [
    "ADMIN_EMULATOR_PORT",
    "PEEK_PAGE",
    "SOCKET_TIMEOUT_S",
    "ServiceBusBackend",
    "admin_client_kwargs",
    "admin_http_url",
    "admin_transport",
    "amqp_client_kwargs",
    "from_sdk_message",
    "normalize_namespace",
    "plain_http_transport_class",
    "queue_info",
    "sdk_connection_string",
    "subscription_info",
    "to_sdk_message",
    "topic_info",
    "translate_error",
]
