"""Correlation filters: the keys the service, Microsoft's Config.json and the admin SDK spell
them with, the SQL system property each one compares, and the refusal of one that is malformed."""

from __future__ import annotations

from sbdlq.errors import BadInput

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


_CORRELATION_KNOWN = (
    "ContentType, CorrelationId, Label, MessageId, ReplyTo, ReplyToSessionId, SessionId, To, Properties"
)


class BadCorrelationFilter(BadInput):
    """A correlation filter that isn't an object of known properties."""

    @classmethod
    def not_an_object(cls) -> BadCorrelationFilter:
        return cls("a correlation filter is an object of property names and values")

    @classmethod
    def properties_not_an_object(cls, key: str) -> BadCorrelationFilter:
        return cls(f"correlation filter {key!r} must be an object of application properties")

    @classmethod
    def unknown_key(cls, key: str) -> BadCorrelationFilter:
        return cls(f"unknown correlation filter property {key!r}", hint=f"use {_CORRELATION_KNOWN}")
