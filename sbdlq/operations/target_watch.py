"""A targeted run's watch on its topic: its lease held, the topic read again before each chunk,
and the copies that may have gone elsewhere when something changed under the run.

Copies carrying `sbdlq-target` reach their one subscription only while every subscription's
rules are rewritten (`routing enable-targeted`). Two things can change that while a run sends:
`routing disable-targeted`, which the run's lease (operations/lease.py) holds off unless it is
forced, and a subscription created meanwhile, whose default rule takes everything (no lease can
stop another team's `az` command). So before each chunk the run lists the topic's subscriptions
and reads its own subscription's rules (two admin calls, asked together on a namespace): its
lease still there (renewed every RENEW_S), its own rules still targeted, no new subscription.
The whole topic's rules are read again as before (TopicWatch's pace: about a tenth of the run,
at most every 30 s), and once more after the last chunk.

A chunk is confirmed by the first check that began after its copies were sent; a check that
fails stops the run, and every copy not confirmed is counted, per subscription that may hold
it, in `strays()`: at most one chunk for a new subscription or a lost lease, the copies since
the last whole read for a subscription whose rules changed. The run reports them (exit 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from time import monotonic

from sbdlq.addresses import EntityPath
from sbdlq.backends.base import Backend
from sbdlq.errors import BadInput, RuleChanged, SbdlqError
from sbdlq.models import SubscriptionRule, SubscriptionRules
from sbdlq.operations import lease as leases
from sbdlq.operations.routing_check import RoutingCheck
from sbdlq.operations.targeted import read_rules, require_targeted, topic_state

#: The longest a run sends on a whole read saying targeted routing is enabled (on a namespace).
RECHECK_MAX_S = 30.0
#: A whole read is repeated once it is older than this many times what it took: the reads
#: cost a run at most about a tenth of its time.
RECHECK_COST_RATIO = 10

#: Why a subscription may hold copies it was not meant to (a stray's `cause`: results.STRAY_CAUSES).
CREATED = "created"
CHANGED = "changed"
UNVERIFIED = "unverified"
MISSED = "missed"


@dataclass(frozen=True, slots=True)
class Stray:
    """A subscription that may hold copies meant for another one (or, `missed`, may lack them)."""

    subscription: str
    at_most: int
    cause: str

    def to_json(self) -> dict[str, object]:
        return {"subscription": self.subscription, "at_most": self.at_most, "cause": self.cause}


class TargetWatch:
    """The checks a targeted run makes before each chunk, and what they could not confirm."""

    def __init__(
        self,
        backend: Backend,
        topic: EntityPath,
        subscription: str,
        *,
        hold_lease: bool,
        clock: Callable[[], float] | None = None,
        wall: Callable[[], datetime] | None = None,
    ) -> None:
        self.backend = backend
        self.topic = topic
        self.subscription = subscription
        self.hold_lease = hold_lease
        self.clock = clock if clock is not None else monotonic  # looked up now: a test may set it
        self.wall = wall if wall is not None else leases.now_utc
        self.lease: SubscriptionRule | None = None
        self.lease_at: datetime | None = None
        self.known: dict[str, str] = {}  # the subscriptions at the start: lowercased → as spelled
        #: copies whose send began / ended; those ended before a check began are confirmed by it
        self.tried = 0
        self.done = 0
        self.chunk_confirmed = 0  # by the last check that passed
        self.whole_confirmed = 0  # by the last whole read that passed
        self.read_at = -math.inf
        self.every_s = 0.0
        #: the line the run stopped on (None while every check passed)
        self.failure: str | None = None
        self.new: dict[str, str] = {}  # subscriptions that appeared: lowercased → as spelled
        self.changed: list[str] = []  # others whose targeted routing is no longer on
        self.own_changed = False
        self.unverified = False
        self.finished = False  # the last check made (finish)
        self._lock = asyncio.Lock()
        self._ahead: asyncio.Task[str | None] | None = None  # the next chunk's check, begun early

    @property
    def path(self) -> EntityPath:
        """The run's subscription."""
        return EntityPath(self.topic.name, self.subscription)

    async def start(self) -> list[SubscriptionRules]:
        """The first whole read (refused unless targeted routing is enabled); with a lease, the lease
        written, then the rules read again: a disable that began meanwhile refuses the run."""
        async with self._lock:
            began = self.clock()
            subscriptions = await require_targeted(self.backend, self.topic)
            self._timed(began)
            spelled = {s.subscription.lower(): s.subscription for s in subscriptions}
            if self.hold_lease and self.subscription.lower() in spelled:
                self.subscription = spelled[self.subscription.lower()]
                try:
                    await self._acquire()
                    subscriptions = await require_targeted(self.backend, self.topic)
                    disabling = [x for x in leases.leases_in(subscriptions) if x.kind == leases.DISABLE]
                    disabling = [x for x in disabling if x.live(self.wall())]
                    if disabling:
                        raise leases.RoutingLeased(
                            f"targeted routing on topic {self.topic} is being disabled by {disabling[0].line()}",
                            hint="nothing was sent; enable it again once that is done, then run again",
                        )
                except BaseException:
                    await self._release()
                    raise
            self.known = {s.subscription.lower(): s.subscription for s in subscriptions}
            return subscriptions

    async def _acquire(self) -> None:
        """Write the run's lease (held from before the write: a create whose answer was lost is removed too)."""
        now = self.wall()
        rule = leases.lease_rule(leases.new_token(), leases.RUN, leases.holder_name(), self._until(now))
        self.lease, self.lease_at = rule, now
        await self.backend.create_rule(self.path, rule)

    def _until(self, now: datetime) -> datetime:
        """A lease's end, written `now`."""
        return now + timedelta(seconds=leases.LEASE_S)

    def sending(self, copies: int) -> None:
        """Copies about to be sent (counted before the send: one that fails may still have gone)."""
        self.tried += copies

    def sent(self, copies: int) -> None:
        """Copies whose send has ended, one way or the other. With none left in flight, the next
        chunk's check begins now, while the run completes these originals: it waits on no send."""
        self.done += copies
        if self.done == self.tried and self.failure is None and self._ahead is None and not self._lock.locked():
            self._ahead = asyncio.get_running_loop().create_task(self._locked_check(False))

    async def lost(self, *, whole: bool = False) -> str | None:
        """Before a chunk: None when copies may go; else the line the run stops on (and stays on)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            stop = await ahead  # begun after the last send ended: it checks for this chunk
            if stop is not None or not whole:
                return stop
        return await self._locked_check(whole)

    async def _locked_check(self, whole: bool) -> str | None:
        """One check at a time; once failed, the failure."""
        async with self._lock:
            if self.failure is not None:
                return self.failure
            return await self._check(whole)

    async def _check(self, whole: bool) -> str | None:
        """One check: the cheap one, and the whole topic when due (or `whole`); a failure stays."""
        checked, began = self.done, self.clock()
        read_whole = False
        try:
            problem = await self._check_chunk()
            if problem is None and (whole or began - self.read_at >= self.every_s):
                read_whole = True
                problem = await self._check_whole(began, checked)
        except SbdlqError as exc:
            self.unverified = True
            problem = f"cannot read topic {self.topic}'s rules to check targeted routing ({exc.message})"
        if problem is None:
            self.chunk_confirmed = checked
            return None
        if not self.unverified and not read_whole:
            # Which subscriptions the unconfirmed copies may have reached: the whole topic, now.
            with contextlib.suppress(SbdlqError):
                await self._check_whole(self.clock(), None)
        self.failure = f"{problem}: stopped before sending more copies"
        return self.failure

    async def _check_chunk(self) -> str | None:
        """The cheap check: the subscriptions listed, the run's own subscription's rules and lease."""
        names, rules = await asyncio.gather(
            self.backend.subscription_names(self.topic), self.backend.rules_of(self.path)
        )
        if problem := self._appeared(names):
            return problem
        if self.lease is not None and (problem := await self._keep_lease(rules)):
            return problem
        own = SubscriptionRules(self.subscription, "Active", rules)
        if topic_state(self.topic, [own]).state != "enabled":
            self.own_changed = _may_miss(self.topic, own)
            return f"targeted routing on subscription {self.subscription} of topic {self.topic} changed"
        return None

    def _appeared(self, names: list[str]) -> str | None:
        for name in names:
            if name.lower() not in self.known:
                self.new.setdefault(name.lower(), name)
        if not self.new:
            return None
        return f"subscription(s) {', '.join(sorted(self.new.values()))} appeared on topic {self.topic} during the run"

    async def _keep_lease(self, rules: tuple[SubscriptionRule, ...]) -> str | None:
        """None while the lease is the run's own (renewed when due); else why it is gone."""
        lease, at = self.lease, self.lease_at
        assert lease is not None and at is not None
        taken = f"this run's lease on topic {self.topic}'s targeted routing was taken over or removed"
        held = [r for r in rules if r.name.lower() == lease.name.lower()]
        if held and held[0].sql != lease.sql:
            # Only this run writes its lease's name: a renewal whose answer was lost is still its own.
            mine = leases.read_lease(self.subscription, held[0])
            if mine is not None and mine.kind == leases.RUN and mine.holder == leases.holder_name():
                lease, at = held[0], mine.until - timedelta(seconds=leases.LEASE_S)
                self.lease, self.lease_at = lease, at
        if not held or held[0].sql != lease.sql:
            self.lease = None
            return taken
        now = self.wall()
        if now - at < timedelta(seconds=leases.RENEW_S):
            return None
        token = lease.name[len(leases.LEASE_PREFIX) :]
        renewed = leases.lease_rule(token, leases.RUN, leases.holder_name(), self._until(now))
        try:
            await self.backend.update_rule(self.path, renewed, expected=held[0])
        except RuleChanged:
            self.lease = None
            return taken
        except SbdlqError:
            if now - at < timedelta(seconds=leases.LEASE_S - leases.MARGIN_S):
                return None  # kept long enough for this chunk; renewed at the next one
            raise
        self.lease, self.lease_at = renewed, now
        return None

    async def _check_whole(self, began: float, checked: int | None) -> str | None:
        """The whole topic's rules: which subscriptions are no longer targeted, or new."""
        subscriptions = await read_rules(self.backend, self.topic)
        self._timed(began)
        state = topic_state(self.topic, subscriptions)
        own = self.subscription.lower()
        self.changed = [
            s.subscription
            for s in state.subscriptions
            if s.state != "on" and s.subscription.lower() != own and s.subscription.lower() in self.known
        ]
        for sub, sub_state in zip(subscriptions, state.subscriptions, strict=True):
            if sub.subscription.lower() == own and sub_state.state != "on":
                self.own_changed = _may_miss(self.topic, sub)
        if problem := self._appeared([s.subscription for s in subscriptions]):
            return problem
        if state.state != "enabled":
            return f"targeted routing is {state.state} on topic {self.topic} now"
        if checked is not None:
            self.whole_confirmed = checked
        return None

    def _timed(self, began: float) -> None:
        self.read_at = self.clock()
        self.every_s = min(RECHECK_MAX_S, RECHECK_COST_RATIO * (self.read_at - began))

    async def finish(self) -> None:
        """After the last chunk: one more check, with the whole topic, for copies not yet confirmed;
        then the lease is given back."""
        try:
            if self.tried > self.whole_confirmed:
                await self.lost(whole=True)
            self.finished = True
        finally:
            await self.close()

    async def _release(self) -> None:
        """Remove the lease (only while it is still this run's own)."""
        lease, self.lease = self.lease, None
        if lease is not None:
            with contextlib.suppress(SbdlqError):
                await self.backend.delete_rule(self.path, lease.name, expected=lease)

    async def close(self) -> None:
        """Give the lease back however the run ended (idempotent)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.cancel()
            with contextlib.suppress(BaseException):
                await ahead
        await self._release()

    def strays(self) -> list[Stray]:
        """The subscriptions that may hold copies meant for this one, and at most how many each."""
        since_check = self.tried - self.chunk_confirmed
        since_whole = self.tried - self.whole_confirmed
        found = [Stray(name, since_check, CREATED) for _, name in sorted(self.new.items())]
        found += [Stray(name, since_whole, CHANGED) for name in self.changed]
        if self.unverified or (not self.finished and self.failure is None):
            # Unread, or the run cut short (a second signal) before its last check: nothing proves where they went.
            listed = {s.subscription.lower() for s in found} | {self.subscription.lower()}
            unread = [name for key, name in sorted(self.known.items()) if key not in listed]
            found += [Stray(name, since_whole, UNVERIFIED) for name in unread]
        if self.own_changed:
            # Its own rules are read before every chunk: a change is seen within one.
            found.append(Stray(self.subscription, since_check, MISSED))
        return [s for s in found if s.at_most > 0]


def _may_miss(topic: EntityPath, own: SubscriptionRules) -> bool:
    """Whether copies may have missed the run's subscription, its targeting changed: unless its
    rules as read now take every message (a disable's steps restore its rules before they remove
    its target rule, so it took every copy all along)."""
    try:
        return not RoutingCheck(topic, [own]).takes_everything(own.subscription)
    except BadInput:
        return True  # rules sbdlq cannot read: nothing proves the copies reached it
