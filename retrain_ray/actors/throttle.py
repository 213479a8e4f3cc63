"""ThrottleActor: the campaign's leased FIFO semaphore for one shared endpoint, hosted in Ray.

A thin async wrapper around `retrain_ray.throttle.semaphore.LeasedSemaphore` (the algorithm lives
there). `acquire` grants at once when a slot is free and nobody is queued; otherwise it joins the
semaphore's FIFO queue and awaits an asyncio future that is resolved exactly when the semaphore
grants that ticket (no polling). A background reaper runs every `lease_ttl_s / 4`, takes back leases
whose holders stopped renewing (crashed, killed, hung) and hands their slots to the oldest waiters,
so a dead holder's slot returns within TTL + one reaper period. `acquire_many` takes several slots in
one call (all or nothing, FIFO); `renew_many` and `release_many` let one process renew or release all
of its leases in one call (the client's per-process lease keeper renews this way).

Sessions batch the traffic of one client process: `submit(session, releases, requests)` releases
leases and queues any number of requests in one call and returns at once; `poll(session, max_wait_s)`
waits until some of that session's requests are granted or timed out and returns all of them. So one
round trip carries many grants, and a process with 32 holders makes two calls where it made 64. A
session that stops polling for longer than the lease TTL (its process died) loses its queued requests
and the slots granted to it, so they return within TTL + one reaper period like any dead holder's.

The actor is named `<campaign>/throttle/<endpoint>` in the caller's namespace, created with
`get_if_exists=True`, `num_cpus=0` and a high `max_concurrency` (each waiter is a pending coroutine),
and is not detached: it lives as long as the campaign driver that created it (DESIGN decision 2).
It exports `ray.util.metrics` gauges tagged with campaign and endpoint, refreshed every reaper tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.metrics import Gauge

from retrain_ray.throttle.errors import ThrottleTimeout
from retrain_ray.throttle.semaphore import LeasedSemaphore, check_capacity, check_ttl
from retrain_ray.throttle.types import Lease, ThrottleStats

__all__ = ["ThrottleActor", "get_throttle", "start_throttle", "throttle_name"]

log = logging.getLogger(__name__)

MAX_CONCURRENCY = 10_000  # pending acquires are coroutines; this bounds queued waiters, not threads


def throttle_name(campaign: str, endpoint: str) -> str:
    """The actor name of `endpoint`'s throttle in `campaign`."""
    for label, value in (("campaign", campaign), ("endpoint", endpoint)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"throttle {label} must be a non-empty string, got {value!r}")
    return f"{campaign}/throttle/{endpoint}"


THROTTLE_GAUGES = ("capacity", "in_flight", "waiting", "expired_leases")  # retrain_throttle_<name>


class _Gauges:
    """Prometheus gauges of one throttle (exported as ray_retrain_throttle_* by Ray's metrics agent)."""

    def __init__(self, campaign: str, endpoint: str) -> None:
        tags = {"campaign": campaign, "endpoint": endpoint}
        self._gauges = {}
        for name in THROTTLE_GAUGES:
            gauge = Gauge(f"retrain_throttle_{name}", description=f"throttle {name}", tag_keys=tuple(tags))
            gauge.set_default_tags(tags)
            self._gauges[name] = gauge

    def update(self, stats: ThrottleStats) -> None:
        values = (stats.capacity, stats.in_flight, stats.waiting, stats.expired)
        for gauge, value in zip(self._gauges.values(), values, strict=True):
            gauge.set(value)


Request = tuple[int, str, int, float]  # (request id, holder, count, timeout_s) of one client process
Outcome = tuple[int, "list[Lease] | BaseException"]  # (request id, leases granted, or why not)


@dataclass
class _Session:
    """Queued requests and undelivered outcomes of one client process."""

    last_seen: float
    tickets: dict[int, tuple[int, float, float]] = field(default_factory=dict)  # ticket -> (request, since, deadline)
    ready: list[Outcome] = field(default_factory=list)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    polling: int = 0

    def deliver(self, outcome: Outcome) -> None:
        self.ready.append(outcome)
        self.event.set()


@ray.remote(num_cpus=0, max_concurrency=MAX_CONCURRENCY)  # pyright: ignore[reportCallIssue]  # ray's overloads omit max_concurrency
class ThrottleActor:
    """Leased, fair, resizable counting semaphore for one endpoint of one campaign."""

    def __init__(self, campaign: str, endpoint: str, capacity: int, lease_ttl_s: float) -> None:
        self._endpoint = endpoint
        self._sem = LeasedSemaphore(capacity, lease_ttl_s)
        self._futures: dict[int, asyncio.Future[list[Lease]]] = {}
        self._sessions: dict[str, _Session] = {}
        self._ticket_session: dict[int, str] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._gauges = _Gauges(campaign, endpoint)
        self._gauges.update(self._sem.stats())

    async def acquire(self, holder: str, timeout_s: float) -> Lease:
        """Wait (FIFO) for a slot, at most `timeout_s` seconds; raise ThrottleTimeout after that."""
        (lease,) = await self.acquire_many(holder, 1, timeout_s)
        return lease

    async def acquire_many(self, holder: str, count: int, timeout_s: float) -> list[Lease]:
        """Wait (FIFO) for `count` slots at once, at most `timeout_s` s; raise ThrottleTimeout after that.

        All or nothing: the leases are granted together when `count` slots are free and every earlier
        request has been served. `count` above the capacity is refused with a ValueError.
        """
        self._ensure_reaper()
        leases = self._sem.try_acquire_many(holder, count)
        if leases is not None:
            return leases
        if not timeout_s > 0:
            raise ValueError(f"acquire timeout_s must be > 0, got {timeout_s!r} ([backend].acquire_timeout_s)")
        started = time.monotonic()
        ticket = self._sem.enqueue(holder, count)
        future = asyncio.get_running_loop().create_future()
        self._futures[ticket] = future
        self._wake()
        try:
            await asyncio.wait({future}, timeout=timeout_s)
        finally:
            if not future.done():  # timed out, or the caller cancelled this task
                self._abandon(ticket, future)
        if future.cancelled():
            raise ThrottleTimeout(self._endpoint, self._sem.capacity, time.monotonic() - started)
        return future.result()

    async def submit(self, session: str, releases: list[str], requests: list[Request]) -> list[str]:
        """One client process's batch: release `releases`, then queue `requests` in order.

        Returns the release ids that were not held. Outcomes of the requests come from `poll`.
        """
        self._ensure_reaper()
        unknown = self._sem.release_many(releases) if releases else []
        state = self._session(session)
        now = state.last_seen = time.monotonic()
        loop = asyncio.get_running_loop()
        for request_id, holder, count, timeout_s in requests:
            try:
                ticket = self._sem.enqueue(holder, count)
            except ValueError as err:
                state.deliver((request_id, err))
                continue
            state.tickets[ticket] = (request_id, now, now + timeout_s)
            self._ticket_session[ticket] = session
            loop.call_later(max(timeout_s, 0.0), self._expire_request, session, ticket)
        self._wake()
        return unknown

    async def poll(self, session: str, max_wait_s: float) -> list[Outcome]:
        """Wait up to `max_wait_s` for outcomes of `session`'s requests; return (and forget) all of them."""
        state = self._session(session)
        state.polling += 1
        try:
            if not state.ready:
                state.event.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(state.event.wait(), timeout=max_wait_s)
        finally:
            state.polling -= 1
            state.last_seen = time.monotonic()
        ready, state.ready = state.ready, []
        return ready

    async def renew(self, lease_id: str) -> Lease:
        """Extend a lease by its TTL. Raises UnknownLease if it was released or reclaimed."""
        return self._sem.renew(lease_id)

    async def renew_many(self, lease_ids: list[str]) -> list[str]:
        """Extend every held lease of `lease_ids` by its TTL; return the ids not held (lost)."""
        return self._sem.renew_many(lease_ids)

    async def release(self, lease_id: str) -> None:
        """Give a slot back; the oldest waiter gets it. Raises UnknownLease if it is not held."""
        self._sem.release(lease_id)
        self._wake()

    async def release_many(self, lease_ids: list[str]) -> list[str]:
        """Give slots back in one call; return the ids that were not held (reclaimed or released)."""
        unknown = self._sem.release_many(lease_ids)
        self._wake()
        return unknown

    async def resize(self, capacity: int) -> None:
        """Change capacity now: growing wakes waiters, shrinking waits for holders to release."""
        self._sem.resize(check_capacity(capacity))
        self._wake()
        self._gauges.update(self._sem.stats())

    async def stats(self) -> ThrottleStats:
        return self._sem.stats()

    async def leases(self) -> list[Lease]:
        """Leases held now, oldest grant first (times are this actor's monotonic clock)."""
        return self._sem.leases()

    def _wake(self) -> None:
        """Resolve the futures of every ticket the semaphore granted; hand back orphaned grants."""
        grants = self._sem.pop_grants()
        while grants:
            by_ticket: dict[int, list[Lease]] = {}
            for ticket, lease in grants:
                by_ticket.setdefault(ticket, []).append(lease)
            for ticket, leases in by_ticket.items():
                session = self._ticket_session.pop(ticket, None)
                if session is not None:
                    request_id, _, _ = self._sessions[session].tickets.pop(ticket)
                    self._sessions[session].deliver((request_id, leases))
                    continue
                future = self._futures.pop(ticket, None)
                if future is None or future.done():
                    self._sem.release_many([lease.lease_id for lease in leases])  # waiter gone: next in line
                else:
                    future.set_result(leases)
            grants = self._sem.pop_grants()

    def _abandon(self, ticket: int, future: asyncio.Future[list[Lease]]) -> None:
        """Take a waiter that gave up out of the queue (or release what it was just granted)."""
        self._futures.pop(ticket, None)
        future.cancel()
        leases = self._sem.cancel(ticket)
        if leases:
            self._sem.release_many([lease.lease_id for lease in leases])
        self._wake()  # a cancelled batch at the head may have blocked smaller requests

    def _session(self, session: str) -> _Session:
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions[session] = _Session(last_seen=time.monotonic())
        return state

    def _expire_request(self, session: str, ticket: int) -> None:
        """A request's timeout passed: if it is still queued, answer it with a ThrottleTimeout."""
        if self._ticket_session.get(ticket) != session:
            return  # granted (or its session dropped) in time
        del self._ticket_session[ticket]
        state = self._sessions[session]
        request_id, since, _ = state.tickets.pop(ticket)
        self._sem.release_many([lease.lease_id for lease in self._sem.cancel(ticket)])
        state.deliver((request_id, ThrottleTimeout(self._endpoint, self._sem.capacity, time.monotonic() - since)))
        self._wake()

    def _drop_dead_sessions(self) -> None:
        """Forget sessions that stopped polling for a TTL: cancel their requests, free their grants."""
        stale = time.monotonic() - self._sem.lease_ttl_s
        for name, state in list(self._sessions.items()):
            if state.polling or state.last_seen > stale:
                continue
            for ticket in state.tickets:
                self._ticket_session.pop(ticket, None)
                self._sem.cancel(ticket)
            undelivered = [lease for _, leases in state.ready if isinstance(leases, list) for lease in leases]
            self._sem.release_many([lease.lease_id for lease in undelivered])
            del self._sessions[name]
            if state.tickets or undelivered:
                log.warning("throttle %s dropped session %s (no poll within the lease TTL): %d queued "
                            "requests, %d undelivered leases", self._endpoint, name, len(state.tickets),
                            len(undelivered))
        self._wake()

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        period_s = self._sem.lease_ttl_s / 4
        while True:
            await asyncio.sleep(period_s)
            try:
                for lease in self._sem.reclaim_expired():
                    log.warning("throttle %s reclaimed lease %s of %s (not renewed within its TTL)",
                                self._endpoint, lease.lease_id, lease.holder)
                self._wake()
                self._drop_dead_sessions()
                self._gauges.update(self._sem.stats())
            except Exception:  # keep reaping; a failed gauge export must not stop reclaiming
                log.exception("throttle %s reaper tick failed", self._endpoint)


def start_throttle(
    campaign: str, endpoint: str, capacity: int, *, namespace: str, lease_ttl_s: float
) -> Any:
    """Create (or get, if it already exists) the throttle actor of `endpoint` in `campaign`.

    An existing actor is returned unchanged: call `handle.resize.remote(n)` to change its capacity.
    The actor reaps expired leases from its first acquire on.
    """
    name = throttle_name(campaign, endpoint)
    check_capacity(capacity)
    check_ttl(lease_ttl_s)
    return ThrottleActor.options(name=name, namespace=namespace, get_if_exists=True).remote(  # pyright: ignore[reportAttributeAccessIssue]  # an @ray.remote class
        campaign, endpoint, capacity, lease_ttl_s
    )


def get_throttle(campaign: str, endpoint: str, namespace: str) -> Any:
    """The handle of a running throttle actor; a clear LookupError if none was started."""
    name = throttle_name(campaign, endpoint)
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        raise LookupError(
            f"no throttle actor named {name!r} in Ray namespace {namespace!r}; fix: start it from the "
            f"campaign driver with start_throttle({campaign!r}, {endpoint!r}, capacity, namespace=...), "
            f"and use the same namespace in the run"
        ) from None
