"""Feeds and entries of the admin API carry what Service Bus writes: each entry's id and self
link is its entity's (or rule's) URL with the api-version, its title the name, its author the
namespace, and in a feed an xml:base of the feed's URL; the feed's id and self link are the
request's URL. The JavaScript SDK takes names from the entry id's path."""

from __future__ import annotations

import urllib.request
import xml.etree.ElementTree as ET
from typing import Any

import pytest

pytest.importorskip("proton")

_ATOM = "{http://www.w3.org/2005/Atom}"
_XML_BASE = "{http://www.w3.org/XML/1998/namespace}base"


def _get(emulator: Any, path: str) -> tuple[str, ET.Element]:
    url = f"http://127.0.0.1:{emulator.http_port}/{path}?api-version=2021-05"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return url, ET.fromstring(reply.read())


def _entries(feed: ET.Element) -> dict[str, tuple[str, str, str, str]]:
    """title → (id, self link, xml:base, author) of each entry."""
    out = {}
    for entry in feed.findall(f"{_ATOM}entry"):
        link = entry.find(f"{_ATOM}link[@rel='self']")
        author = entry.findtext(f"{_ATOM}author/{_ATOM}name") or ""
        out[entry.findtext(f"{_ATOM}title") or ""] = (
            entry.findtext(f"{_ATOM}id") or "",
            "" if link is None else link.get("href", ""),
            entry.get(_XML_BASE, ""),
            author,
        )
    return out


def _check_feed(feed: ET.Element, url: str, title: str) -> None:
    assert feed.tag == f"{_ATOM}feed"
    assert feed.findtext(f"{_ATOM}title") == title
    assert feed.findtext(f"{_ATOM}id") == url
    self_link = feed.find(f"{_ATOM}link[@rel='self']")
    assert self_link is not None and self_link.get("href") == url


def test_queue_and_topic_feeds_name_each_entity_by_its_url(emulator: Any) -> None:
    q = emulator.queue()
    topic = emulator.topic()
    base = f"http://127.0.0.1:{emulator.http_port}"
    for path, title, name in (("$Resources/Queues", "Queues", q), ("$Resources/Topics", "Topics", topic)):
        url, feed = _get(emulator, path)
        _check_feed(feed, url, title)
        entries = _entries(feed)
        own = f"{base}/{name}?api-version=2021-05"
        assert entries[name] == (own, own, url, "127.0.0.1")


def test_subscription_and_rule_feeds_name_each_by_its_url(emulator: Any) -> None:
    topic = emulator.topic("audit", "billing")
    base = f"http://127.0.0.1:{emulator.http_port}"
    url, feed = _get(emulator, f"{topic}/Subscriptions")
    _check_feed(feed, url, "Subscriptions")
    entries = _entries(feed)
    assert sorted(entries) == ["audit", "billing"]
    own = f"{base}/{topic}/Subscriptions/audit?api-version=2021-05"
    assert entries["audit"] == (own, own, url, "127.0.0.1")
    url, feed = _get(emulator, f"{topic}/Subscriptions/audit/Rules")
    _check_feed(feed, url, "Rules")
    own = f"{base}/{topic}/Subscriptions/audit/Rules/$Default?api-version=2021-05"
    assert _entries(feed) == {"$Default": (own, own, url, "127.0.0.1")}


def test_an_entry_read_alone_is_named_by_its_own_url(emulator: Any) -> None:
    """Read through a lower-case path, the entry still names the entity as the service spells it."""
    topic = emulator.topic("audit")
    _url, entry = _get(emulator, f"{topic}/subscriptions/audit")
    own = f"http://127.0.0.1:{emulator.http_port}/{topic}/Subscriptions/audit?api-version=2021-05"
    assert entry.findtext(f"{_ATOM}id") == own
    assert entry.findtext(f"{_ATOM}title") == "audit"
    link = entry.find(f"{_ATOM}link[@rel='self']")
    assert link is not None and link.get("href") == own


def test_entity_times_are_the_stored_ones_not_the_request_time(emulator: Any) -> None:
    """Two reads give the same CreatedAt, UpdatedAt and AccessedAt: the engine's, in the entry
    and in the feed (published and updated are CreatedAt and UpdatedAt)."""
    from datetime import datetime

    q = emulator.queue()
    info = emulator.engine.get_entity(q)
    stored = [info.created_at, info.updated_at, info.accessed_at]
    sb = "{http://schemas.microsoft.com/netservices/2010/10/servicebus/connect}"
    for _ in range(2):
        _url, entry = _get(emulator, q)
        description = entry.find(f"{_ATOM}content/{sb}QueueDescription")
        assert description is not None
        read = [
            datetime.fromisoformat(description.findtext(f"{sb}{n}") or "")
            for n in ("CreatedAt", "UpdatedAt", "AccessedAt")
        ]
        assert read == stored
        assert datetime.fromisoformat(entry.findtext(f"{_ATOM}published") or "") == info.created_at
        assert datetime.fromisoformat(entry.findtext(f"{_ATOM}updated") or "") == info.updated_at
