"""The client sessions of one throttle actor: whose ticket is whose, what each holds, its `PoolState`.

A session batches the traffic of one client process (`ThrottleActor.submit` / `poll` / `exchange`).
A session that stops polling for longer than the lease TTL and `SESSION_GRACE_S` (its process died)
is forgotten with its queued requests and undelivered grants; its held slots return within TTL + one
reaper period like any dead holder's. When one lease of a session expires unrenewed, all of its
leases are taken back at once and its queued single-slot requests are dropped (`reclaim_silent`).
Every method runs on the actor's event loop; none of them wakes the semaphore's waiters, the actor
does that after each.
"""

from __future__ import annotations

import logging
import time

from retrain_ray.actors.throttle_support import Session
from retrain_ray.throttle.semaphore import LeasedSemaphore
from retrain_ray.throttle.types import Lease, PoolState, ThrottleTimeout

__all__ = ["SESSION_GRACE_S", "Sessions"]

log = logging.getLogger(__name__)

SESSION_GRACE_S = 10.0  # a live client polls at least every 5 s while it waits or holds


class Sessions:
    """The sessions of one throttle actor, by name, and the tickets they queued in its semaphore."""

    def __init__(self, endpoint: str, sem: LeasedSemaphore, first_incarnation: int = 0) -> None:
        """`first_incarnation`: after a restart, a number above every incarnation and `PoolState.seq` the
        dead actor handed out, so that every client takes the new state and hears that its session (and
        its queued requests) was forgotten."""
        self._endpoint = endpoint
        self._sem = sem
        self._by_name: dict[str, Session] = {}
        self._ticket_session: dict[int, str] = {}
        self._seq = first_incarnation
        self._incarnations = first_incarnation

    def get(self, session: str) -> Session:
        """The state of `session`, a fresh one (next incarnation) if it is new or was dropped."""
        state = self._by_name.get(session)
        if state is None:
            self._incarnations += 1
            state = self._by_name[session] = Session(time.monotonic(), self._incarnations)
        return state

    def track(self, session: str, ticket: int, request_id: int, since: float, count: int) -> None:
        """`session` queued `ticket` for its request `request_id` of `count` slots."""
        self._by_name[session].tickets[ticket] = (request_id, since, count)
        self._ticket_session[ticket] = session

    def cancel(self, state: Session, request_ids: list[int]) -> None:
        """Withdraw the queued requests `request_ids` of `state` (release what they were just granted)."""
        for ticket, (request_id, _, _) in list(state.tickets.items()):
            if request_id in request_ids:
                self._forget_ticket(state, ticket)

    def deliver_grant(self, ticket: int, leases: list[Lease]) -> bool:
        """Hand a granted ticket's leases to its session; False if no session queued it."""
        session = self._ticket_session.pop(ticket, None)
        if session is None:
            return False
        state = self._by_name[session]
        request_id, _, _ = state.tickets.pop(ticket)
        state.held.update(lease.lease_id for lease in leases)
        state.deliver((request_id, leases))
        return True

    def expire(self, session: str, ticket: int) -> bool:
        """A request's timeout passed: if it is still queued, answer it with a ThrottleTimeout (True)."""
        if self._ticket_session.get(ticket) != session:
            return False  # granted (or its session dropped) in time
        state = self._by_name[session]
        request_id, since, _ = state.tickets[ticket]
        self._forget_ticket(state, ticket)
        state.deliver((request_id, self._timeout(since)))
        return True

    def reclaim_silent(self, now: float) -> None:
        """A session with a lease past its expiry stopped renewing (the keeper renews all of a process's
        leases in one call): its process is dead or stalled past the TTL. Take back all of its leases,
        including those granted to its queued requests since it went silent, and answer its queued
        single-slot requests with a ThrottleTimeout (a live but stalled client asks again), so the
        slots go to live waiters, and a dead process's slots all come back at its first missed expiry.
        """
        expiring = {lease.lease_id for lease in self._sem.expiring(now)}
        for name, state in self._by_name.items():
            if not expiring & state.held:
                continue
            asks = [(ticket, entry) for ticket, entry in state.tickets.items() if entry[2] == 1]
            for ticket, (request_id, since, _) in asks:
                self._forget_ticket(state, ticket)
                state.deliver((request_id, self._timeout(since)))
            taken = self._sem.reclaim(state.held, now)
            state.held.clear()
            log.warning("throttle %s: session %s stopped renewing; %d leases reclaimed, %d queued requests "
                        "dropped", self._endpoint, name, len(taken), len(asks))

    def drop_dead(self) -> None:
        """Forget sessions that stopped polling (TTL, at least SESSION_GRACE_S): cancel their requests,
        free their grants. (Its leases went back at its first missed expiry: `reclaim_silent`.)"""
        stale = time.monotonic() - max(self._sem.lease_ttl_s, SESSION_GRACE_S)
        for name, state in list(self._by_name.items()):
            if state.polling or state.last_seen > stale:
                continue
            for ticket in state.tickets:
                self._ticket_session.pop(ticket, None)
                self._sem.cancel(ticket)
            undelivered = [lease for _, leases in state.ready if isinstance(leases, list) for lease in leases]
            self._sem.release_many([lease.lease_id for lease in undelivered])
            del self._by_name[name]
            if state.tickets or undelivered:
                log.warning("throttle %s dropped session %s (no poll within the lease TTL): %d queued "
                            "requests, %d undelivered leases", self._endpoint, name, len(state.tickets),
                            len(undelivered))

    def pool_state(self, state: Session) -> PoolState:
        """How many slots the session of `state` may keep between holds now (see ThrottleActor's doc)."""
        sem = self._sem
        state.held = {lease_id for lease_id in state.held if sem.holds(lease_id)}
        own_asks = sum(1 for _, _, count in state.tickets.values() if count == 1)
        others = sem.waiting > own_asks
        if sem.in_flight > sem.capacity:  # shrunk: give back the excess
            keep = max(0, len(state.held) - (sem.in_flight - sem.capacity))
        elif others and sem.head_count > 1:  # a batch needs whole slots back
            keep = 0
        else:
            keep = sem.capacity
        self._seq += 1
        return PoolState(self._endpoint, sem.capacity, others, keep, self._seq, state.incarnation)

    def notify(self) -> None:
        """Wake each pending poll_pool whose session's PoolState changed."""
        for state in self._by_name.values():
            if state.told is not None and self.pool_state(state).key() != state.told:
                state.event.set()

    def _forget_ticket(self, state: Session, ticket: int) -> None:
        """Take `ticket` of `state` out of the queue, releasing what it was granted meanwhile."""
        del state.tickets[ticket]
        self._ticket_session.pop(ticket, None)
        self._sem.release_many([lease.lease_id for lease in self._sem.cancel(ticket)])

    def _timeout(self, since: float) -> ThrottleTimeout:
        return ThrottleTimeout(self._endpoint, self._sem.capacity, time.monotonic() - since)
