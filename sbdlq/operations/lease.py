"""The lease on a topic's targeted routing, kept on the broker as a rule that takes no message.

A targeted run (`resubmit --only-this-subscription`, `replay --only-subscription`) holds one
while it sends; `routing disable-targeted` refuses while one is live, so an operator's disable
cannot change the rules under a run's copies. The lease is a rule named `sbdlq-lease-<token>`
on the run's subscription, whose SQL filter is always FALSE and carries who holds it and until
when: `'sbdlq-lease {"kind":"run","holder":"host pid 7","until":"2026-01-02T03:04:05Z"}' = ''`.
A rule that matches nothing changes no route, so adding, renewing or removing it is safe at
any moment, and every machine that can read the topic's rules sees it (a file would protect
one machine). A run renews its lease while it sends; a holder that died leaves one that
expires LEASE_S after its last renewal (`disable-targeted --force` takes it over sooner).

`disable-targeted` writes a lease of kind `disable` before it reads the leases again and
changes anything, and a run writes its own before it reads the topic's rules: whichever writes
second sees the other, so a run and a disable that start together never both go on.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sbdlq.errors import OperationFailed
from sbdlq.models import SubscriptionRule, SubscriptionRules

LEASE_PREFIX = "sbdlq-lease-"
_MARK = "sbdlq-lease "
_TAIL = " = ''"
#: A lease lasts this long past its last renewal.
LEASE_S = 120.0
#: A run renews its lease once this long has passed since the last renewal.
RENEW_S = 30.0
#: A run sends a chunk only while at least this much of its lease is left, by its own clock.
MARGIN_S = 60.0
#: Another machine's clock may be this far off: a lease counts as live this long past its end.
SKEW_S = 60.0
RUN = "run"
DISABLE = "disable"


class RoutingLeased(OperationFailed):
    """Targeted routing on the topic is leased by the other side (a run, or a disable): refused (exit 1)."""


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def now_utc() -> datetime:
    """The wall clock leases are written and judged by."""
    return datetime.now(UTC)


def holder_name() -> str:
    """Who holds a lease, as `disable-targeted` names it: this machine and process."""
    return f"{socket.gethostname()} pid {os.getpid()}"


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as read from a subscription's rules."""

    subscription: str
    rule: SubscriptionRule
    kind: str
    holder: str
    until: datetime

    def live(self, now: datetime) -> bool:
        """Whether the holder may still count on it (its end, plus the clock skew allowed)."""
        return now < self.until + timedelta(seconds=SKEW_S)

    def line(self) -> str:
        """The lease as messages name it."""
        what = "a targeted run" if self.kind == RUN else "a disable-targeted"
        return f"{what} ({self.holder}) on subscription {self.subscription}, until {self.until:%Y-%m-%dT%H:%M:%SZ}"

    def to_json(self) -> dict[str, str]:
        return {
            "subscription": self.subscription,
            "kind": self.kind,
            "holder": self.holder,
            "until": self.until.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


def new_token() -> str:
    """A lease rule's own part of its name."""
    return uuid.uuid4().hex[:16]


def lease_rule(token: str, kind: str, holder: str, until: datetime) -> SubscriptionRule:
    """The rule that holds a lease (its filter matches no message)."""
    doc = json.dumps(
        {"kind": kind, "holder": holder, "until": until.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return SubscriptionRule(LEASE_PREFIX + token, sql=_sql_text(_MARK + doc) + _TAIL)


def read_lease(subscription: str, rule: SubscriptionRule) -> Lease | None:
    """The lease a rule holds; None when it is not a lease rule."""
    sql = rule.sql
    if not rule.name.lower().startswith(LEASE_PREFIX) or sql is None or not sql.endswith(_TAIL):
        return None
    if rule.correlation is not None or rule.action:
        return None
    literal = sql[: -len(_TAIL)]
    if not (literal.startswith("'" + _MARK) and literal.endswith("'") and len(literal) > len(_MARK) + 2):
        return None
    try:
        doc = json.loads(literal[1 + len(_MARK) : -1].replace("''", "'"))
        until = datetime.strptime(doc["until"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        kind, holder = str(doc["kind"]), str(doc["holder"])
    except (ValueError, KeyError, TypeError):
        return None
    return Lease(subscription, rule, kind, holder, until)


def is_lease(rule: SubscriptionRule) -> bool:
    """Whether a rule is a lease (targeted routing's state and plans leave it out)."""
    return read_lease("", rule) is not None


def leases_in(subscriptions: list[SubscriptionRules]) -> list[Lease]:
    """Every lease on the topic's subscriptions."""
    found = []
    for sub in subscriptions:
        for rule in sub.rules:
            lease = read_lease(sub.subscription, rule)
            if lease is not None:
                found.append(lease)
    return found


def live_runs(subscriptions: list[SubscriptionRules], now: datetime) -> list[Lease]:
    """The leases of targeted runs that may still be sending."""
    return [lease for lease in leases_in(subscriptions) if lease.kind == RUN and lease.live(now)]
