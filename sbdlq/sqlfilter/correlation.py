"""Correlation filters: the keys the service, Microsoft's Config.json and the admin SDK spell
them with, and the SQL system property each one compares."""

from __future__ import annotations

#: Correlation filter keys, compared without case or underscores → the SQL system property.
CORRELATION_KEYS = {
    "contenttype": "ContentType",
    "correlationid": "CorrelationId",
    "label": "Label",
    "subject": "Label",
    "messageid": "MessageId",
    "replyto": "ReplyTo",
    "replytosessionid": "ReplyToSessionId",
    "sessionid": "SessionId",
    "to": "To",
}
#: The keys (same comparison) under which a correlation filter holds application properties.
CORRELATION_PROPS = frozenset({"properties", "applicationproperties", "userproperties"})


def correlation_key(key: object) -> str:
    """A correlation filter key as the tables above compare it."""
    return str(key).replace("_", "").lower()
