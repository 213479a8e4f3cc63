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
round trip carries many grants, and a process with 32 holders makes two calls where it made 64. The
sessions' bookkeeping (dead and silent sessions included) lives in `throttle_sessions.Sessions`.

Local pools (`exchange`, `poll_pool`): the client keeps the slots its process was granted and hands
them from one local hold to the next without a call. The `PoolState` this actor computes for it says
whether others wait (then each slot comes back here after a short block of local holds, and the FIFO
queue serves it) and how many slots it may keep: all of them, none while a batch heads the queue,
fewer than it holds after a shrink. A long `poll_pool` returns as soon as a process's state changes,
so it hears that others wait within one round trip. When one lease of a process expires (it stopped
renewing: dead or hung), all of its leases are taken back at once, those granted to its queued
requests after it went silent included, and its queued single-slot requests are dropped.

The actor is named `<campaign>/throttle/<endpoint>` in the caller's namespace, created with
`get_if_exists=True`, `num_cpus=0` and a high `max_concurrency` (each waiter is a pending coroutine),
and is not detached: it lives as long as the campaign driver that created it (DESIGN decision 2).
It exports `ray.util.metrics` gauges tagged with campaign and endpoint, refreshed every reaper tick.

Restarts: Ray restarts it when it dies (`CONTROL_RESTARTS`, calls in flight retried). Its lease table
is soft state rebuilt from the holders' renewals: for one lease TTL after a restart it grants no new
lease and re-adopts every lease a holder renews (`LeasedSemaphore.start_grace`); then it serves the
waiters FIFO from the slots really free. Every client session gets a new incarnation, so each process
asks again for what it had queued. The capacity the back-pressure actor had set is asked from it
again; the restart is appended to `<campaign>/control_restarts.jsonl` (actors/restarts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import ray

from retrain_ray.actors.backpressure import backpressure_name
from retrain_ray.actors.restarts import CONTROL_RESTARTS, record_restart
from retrain_ray.actors.throttle_sessions import Sessions
from retrain_ray.actors.throttle_support import THROTTLE_GAUGES, Gauges, Outcome, Request, throttle_name
from retrain_ray.actors.worker_env import SERVICE_RUNTIME_ENV
from retrain_ray.throttle.semaphore import LeasedSemaphore, check_capacity, check_ttl
from retrain_ray.throttle.types import Lease, PoolState, Reclaim, ThrottleStats, ThrottleTimeout

__all__ = ["THROTTLE_GAUGES", "ThrottleActor", "get_throttle", "start_throttle", "throttle_name"]

log = logging.getLogger(__name__)

MAX_CONCURRENCY = 10_000  # pending acquires are coroutines; this bounds queued waiters, not threads
RECOVER_TIMEOUT_S = 30.0  # for the back-pressure actor's answer after a restart


@ray.remote(num_cpus=0, max_concurrency=MAX_CONCURRENCY, runtime_env=SERVICE_RUNTIME_ENV,  # pyright: ignore[reportCallIssue]  # ray's overloads omit max_concurrency
            max_restarts=CONTROL_RESTARTS, max_task_retries=-1)
class ThrottleActor:
    """Leased, fair, resizable counting semaphore for one endpoint of one campaign."""

    def __init__(self, campaign: str, endpoint: str, capacity: int, lease_ttl_s: float,
                 campaign_dir: str | None = None) -> None:
        self._campaign = campaign
        self._endpoint = endpoint
        self._sem = LeasedSemaphore(capacity, lease_ttl_s)
        self._restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        first_incarnation = 0
        if self._restarted:
            first_incarnation = time.time_ns() // 1000  # above any number the dead actor handed out
            self._sem.start_grace(id_prefix=f"r{first_incarnation:x}.")
            log.warning("throttle %s restarted: no new lease for %.1f s while holders renew theirs",
                        endpoint, lease_ttl_s)
            if campaign_dir:
                record_restart(Path(campaign_dir), f"throttle {endpoint}")
        self._futures: dict[int, asyncio.Future[list[Lease]]] = {}
        self._sessions = Sessions(endpoint, self._sem, first_incarnation)
        self._reaper: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._gauges = Gauges(campaign, endpoint)
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
        state = self._sessions.get(session)
        state.held.difference_update(releases)
        now = state.last_seen = time.monotonic()
        loop = asyncio.get_running_loop()
        for request_id, holder, count, timeout_s in requests:
            try:
                ticket = self._sem.enqueue(holder, count)
            except ValueError as err:
                state.deliver((request_id, err))
                continue
            self._sessions.track(session, ticket, request_id, now, count)
            loop.call_later(max(timeout_s, 0.0), self._expire_request, session, ticket)
        self._wake()
        return unknown

    async def exchange(
        self, session: str, releases: list[str], requests: list[Request], cancels: list[int]
    ) -> tuple[list[str], list[Outcome], PoolState]:
        """`submit` for a client with a local pool, which may also withdraw queued requests (`cancels`,
        request ids) and gets back the outcomes ready now (a withdrawn request granted before it was
        withdrawn is among them) and the session's `PoolState`."""
        state = self._sessions.get(session)
        self._sessions.cancel(state, cancels)
        unknown = await self.submit(session, releases, requests)
        ready, state.ready = state.ready, []
        return unknown, ready, self._sessions.pool_state(state)

    async def poll_pool(
        self, session: str, max_wait_s: float, told: tuple[int, bool, int] | None
    ) -> tuple[list[Outcome], PoolState]:
        """`poll` that also returns at once when the session's `PoolState.key()` differs from `told`."""
        self._ensure_reaper()
        state = self._sessions.get(session)
        state.polling += 1
        try:
            if not state.ready and self._sessions.pool_state(state).key() == told:
                state.told = told
                state.event.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(state.event.wait(), timeout=max_wait_s)
        finally:
            state.polling -= 1
            state.told = None
            state.last_seen = time.monotonic()
        ready, state.ready = state.ready, []
        return ready, self._sessions.pool_state(state)

    async def cpu_s(self) -> float:
        """CPU seconds this actor's process has used (benchmarks report CPU per grant)."""
        return time.process_time()

    async def poll(self, session: str, max_wait_s: float) -> list[Outcome]:
        """Wait up to `max_wait_s` for outcomes of `session`'s requests; return (and forget) all of them."""
        state = self._sessions.get(session)
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
        self._ensure_reaper()
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

    async def pid(self) -> int:
        """The actor's process id (what a fault test or an operator's `kill` needs)."""
        return os.getpid()

    async def adopted(self) -> int:
        """Leases of the dead actor re-adopted from their holders' renewals since the last restart."""
        return self._sem.adopted

    async def leases(self) -> list[Lease]:
        """Leases held now, oldest grant first (times are this actor's monotonic clock)."""
        return self._sem.leases()

    async def reclaims(self) -> list[Reclaim]:
        """The most recent leases reclaimed for want of renewal, with when (this actor's monotonic clock)."""
        return self._sem.reclaims()

    def _wake(self) -> None:
        """Resolve the futures of every ticket the semaphore granted; hand back orphaned grants."""
        grants = self._sem.pop_grants()
        while grants:
            by_ticket: dict[int, list[Lease]] = {}
            for ticket, lease in grants:
                by_ticket.setdefault(ticket, []).append(lease)
            for ticket, leases in by_ticket.items():
                if self._sessions.deliver_grant(ticket, leases):
                    continue
                future = self._futures.pop(ticket, None)
                if future is None or future.done():
                    self._sem.release_many([lease.lease_id for lease in leases])  # waiter gone: next in line
                else:
                    future.set_result(leases)
            grants = self._sem.pop_grants()
        self._sessions.notify()

    def _abandon(self, ticket: int, future: asyncio.Future[list[Lease]]) -> None:
        """Take a waiter that gave up out of the queue (or release what it was just granted)."""
        self._futures.pop(ticket, None)
        future.cancel()
        leases = self._sem.cancel(ticket)
        if leases:
            self._sem.release_many([lease.lease_id for lease in leases])
        self._wake()  # a cancelled batch at the head may have blocked smaller requests

    def _expire_request(self, session: str, ticket: int) -> None:
        """A request's timeout passed: answered with a ThrottleTimeout if still queued."""
        if self._sessions.expire(session, ticket):
            self._wake()

    async def _recover_capacity(self) -> None:
        """After a restart, the capacity the back-pressure actor set comes back from it (re-registering
        this throttle makes it push its pooled capacity); without one, the configured capacity holds."""
        try:
            advisor = ray.get_actor(backpressure_name(self._campaign), namespace=ray.get_runtime_context().namespace)
        except ValueError:  # no back-pressure actor in this campaign
            return
        try:
            me = ray.get_runtime_context().current_actor
            capacity = await asyncio.wait_for(advisor.set_throttle.remote(self._endpoint, me), RECOVER_TIMEOUT_S)
        except Exception as err:  # the configured capacity holds until its next change
            log.warning("throttle %s: capacity not recovered from the back-pressure actor: %s", self._endpoint, err)
            return
        if capacity is not None:
            self._sem.resize(check_capacity(capacity))
            log.warning("throttle %s: capacity %d recovered from the back-pressure actor", self._endpoint, capacity)

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        period_s = self._sem.lease_ttl_s / 4
        if self._restarted and self._recovery is None:  # its own task: the grace period must not wait on it
            self._recovery = asyncio.get_running_loop().create_task(self._recover_capacity())
        while True:
            await asyncio.sleep(period_s)
            try:
                if self._sem.end_grace_if_due():
                    log.warning("throttle %s: grace over, %d leases re-adopted, serving %d waiters",
                                self._endpoint, self._sem.adopted, self._sem.waiting)
                now = time.monotonic()
                self._sessions.reclaim_silent(now)
                for lease in self._sem.reclaim_expired(now):
                    log.warning("throttle %s reclaimed lease %s of %s (not renewed within its TTL)",
                                self._endpoint, lease.lease_id, lease.holder)
                self._wake()
                self._sessions.drop_dead()
                self._wake()
                self._gauges.update(self._sem.stats())
            except Exception:  # keep reaping; a failed gauge export must not stop reclaiming
                log.exception("throttle %s reaper tick failed", self._endpoint)


def start_throttle(
    campaign: str, endpoint: str, capacity: int, *, namespace: str, lease_ttl_s: float,
    campaign_dir: Path | None = None,
) -> Any:
    """Create (or get, if it already exists) the throttle actor of `endpoint` in `campaign`.

    An existing actor is returned unchanged: call `handle.resize.remote(n)` to change its capacity.
    The actor reaps expired leases from its first call on. Its restarts go to `campaign_dir`'s
    restart log (none when None).
    """
    name = throttle_name(campaign, endpoint)
    check_capacity(capacity)
    check_ttl(lease_ttl_s)
    return ThrottleActor.options(name=name, namespace=namespace, get_if_exists=True).remote(  # pyright: ignore[reportAttributeAccessIssue]  # an @ray.remote class
        campaign, endpoint, capacity, lease_ttl_s, str(campaign_dir) if campaign_dir is not None else None
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
