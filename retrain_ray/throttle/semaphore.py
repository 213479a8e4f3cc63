"""A leased, fair (FIFO), resizable counting semaphore: plain Python, no Ray, no threads.

The algorithm is a counting semaphore whose permits are *leases*: a grant records the holder and an
expiry time `granted_at + lease_ttl_s`; the holder renews to push the expiry forward and releases when
done. `reclaim_expired(now)` takes back every lease not renewed in time, so a holder that crashed or
hung cannot keep a slot for ever. Callers that find no free slot join a FIFO queue (`enqueue`) and are
granted strictly in arrival order as slots free up; `try_acquire` never overtakes a queued waiter.
Grants made to queued waiters are collected in an outbox that the host drains with `pop_grants()`.
A caller may ask for several slots at once (`try_acquire_many`, `enqueue(holder, count)`): the request
is all-or-nothing and keeps its FIFO place, so a batch is granted when `count` slots are free and no
earlier waiter is still queued (an engine sending `count` requests at once takes them in one call).

Departures from the original (spec section 6, `TinkerThrottle`, N `flock`ed slot files):
* fairness: waiters are served FIFO instead of all blocking on slot 0 while slots 1..N-1 sit idle;
* liveness: a lease dies when its holder stops renewing, not only when its process dies (a hung
  process holding a `flock` blocks everybody for ever);
* capacity is changeable while running: growing grants to waiters at once, shrinking revokes nothing
  and takes effect as holders release;
* waiting has a timeout (enforced by the host, see `retrain_ray.actors.throttle`).

Restart grace (`start_grace`): a host that lost its lease table (the throttle actor restarted) grants
no new lease until the grace period ends, while a renewal of a lease it does not know re-adopts that
lease (it counts against capacity again) and a release of one is answered as known. Holders alive
renew within the grace period (one TTL), so when it ends the table holds every live lease and waiters
are served FIFO from the slots that are really free. Lease ids then carry a prefix unique to the
host's lifetime, so a new grant never reuses the id of a lease the dead one granted.

Every method is O(1) or O(number of leases) and takes the current time from `clock`, so tests drive
it event by event with a fake clock.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import replace

from retrain_ray.throttle.types import Lease, Reclaim, ThrottleStats, UnknownLease

__all__ = ["LeasedSemaphore", "Lease", "check_capacity", "check_ttl"]

WAIT_WINDOW = 10_000  # wait times kept for the percentiles (most recent grants)
RECLAIM_WINDOW = 1_000  # reclaimed leases kept for `reclaims()` (most recent)


def check_capacity(capacity: object) -> int:
    """Return `capacity` if it is an int >= 1, else raise a ValueError naming the fix."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(
            f"throttle capacity must be an integer >= 1, got {capacity!r}; "
            f"fix: set [backend].max_concurrent to a positive integer"
        )
    return capacity


def check_ttl(lease_ttl_s: object) -> float:
    """Return `lease_ttl_s` as a float if it is finite and > 0, else raise a ValueError."""
    if isinstance(lease_ttl_s, bool) or not isinstance(lease_ttl_s, (int, float)):
        raise ValueError(f"lease_ttl_s must be a number of seconds > 0, got {lease_ttl_s!r}")
    if not math.isfinite(lease_ttl_s) or lease_ttl_s <= 0:
        raise ValueError(f"lease_ttl_s must be finite and > 0, got {lease_ttl_s!r}")
    return float(lease_ttl_s)


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


class LeasedSemaphore:
    """Counting semaphore with leases, a FIFO waiter queue and run-time capacity changes."""

    def __init__(
        self, capacity: int, lease_ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._capacity = check_capacity(capacity)
        self._ttl_s = check_ttl(lease_ttl_s)
        self._clock = clock
        self._leases: dict[str, Lease] = {}
        self._waiters: OrderedDict[int, tuple[str, int, float]] = OrderedDict()  # ticket -> (holder, count, since)
        self._outbox: list[tuple[int, Lease]] = []
        self._next_id = 0
        self._granted = self._released = self._expired = self._peak = 0
        self._waits_s: deque[float] = deque(maxlen=WAIT_WINDOW)
        self._reclaims: deque[Reclaim] = deque(maxlen=RECLAIM_WINDOW)
        self._grace_until = -math.inf
        self._id_prefix = ""
        self._adopted = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def lease_ttl_s(self) -> float:
        return self._ttl_s

    @property
    def in_flight(self) -> int:
        return len(self._leases)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def head_count(self) -> int:
        """Slots asked by the oldest queued request (0 when nobody waits)."""
        return next(iter(self._waiters.values()))[1] if self._waiters else 0

    @property
    def in_grace(self) -> bool:
        return self._clock() < self._grace_until

    @property
    def adopted(self) -> int:
        """Leases of an earlier lifetime re-adopted on renewal during the grace period."""
        return self._adopted

    def start_grace(self, id_prefix: str) -> None:
        """The host restarted without its lease table: grant nothing for one TTL, adopting renewals;
        new lease ids start with `id_prefix` (unique to this lifetime, without ':')."""
        self._grace_until = self._clock() + self._ttl_s
        self._id_prefix = id_prefix

    def end_grace_if_due(self) -> bool:
        """Serve the waiters once the grace period is over; True when it ended by this call."""
        if self._grace_until == -math.inf or self.in_grace:
            return False
        self._grace_until = -math.inf
        self._grant_waiters()
        return True

    def holds(self, lease_id: str) -> bool:
        return lease_id in self._leases

    def expiring(self, now: float | None = None) -> list[Lease]:
        """The leases `reclaim_expired(now)` would take back, without taking them."""
        now = self._clock() if now is None else now
        return [lease for lease in self._leases.values() if lease.expires_at <= now]

    def leases(self) -> list[Lease]:
        """The leases held now, oldest grant first."""
        return list(self._leases.values())

    def reclaims(self) -> list[Reclaim]:
        """The last RECLAIM_WINDOW leases taken back by `reclaim_expired`, oldest first."""
        return list(self._reclaims)

    def try_acquire(self, holder: str) -> Lease | None:
        """Grant a lease at once if a slot is free and nobody is queued, else return None."""
        leases = self.try_acquire_many(holder, 1)
        return leases[0] if leases else None

    def try_acquire_many(self, holder: str, count: int) -> list[Lease] | None:
        """Grant `count` leases at once if that many slots are free and nobody is queued, else None."""
        _check_holder(holder)
        self._check_count(count)
        if self._waiters or self.in_grace or len(self._leases) + count > self._capacity:
            return None
        return [self._grant(holder, waited_s=0.0) for _ in range(count)]

    def enqueue(self, holder: str, count: int = 1) -> int:
        """Join the FIFO queue for `count` slots; return a ticket. Its grants appear in `pop_grants()`."""
        _check_holder(holder)
        self._check_count(count)
        ticket = self._next_id
        self._next_id += 1
        self._waiters[ticket] = (holder, count, self._clock())
        self._grant_waiters()
        return ticket

    def cancel(self, ticket: int) -> list[Lease]:
        """Leave the queue. If the ticket was granted but not yet popped, return its leases (now yours)."""
        if self._waiters.pop(ticket, None) is not None:
            self._grant_waiters()  # a batch at the head may have blocked smaller requests behind it
            return []
        mine = [lease for granted_ticket, lease in self._outbox if granted_ticket == ticket]
        self._outbox = [(t, lease) for t, lease in self._outbox if t != ticket]
        return mine

    def pop_grants(self) -> list[tuple[int, Lease]]:
        """Drain the grants made to queued tickets since the last call, in grant (= FIFO) order.

        A ticket that asked for `count` slots appears `count` times, consecutively.
        """
        grants, self._outbox = self._outbox, []
        return grants

    def renew(self, lease_id: str) -> Lease:
        """Push a lease's expiry to now + TTL. Raises UnknownLease if it was released or reclaimed."""
        lease = self._leases.get(lease_id) or self._adopt(lease_id)
        if lease is None:
            raise UnknownLease(lease_id)
        renewed = replace(lease, expires_at=self._clock() + lease.ttl_s)  # the granted TTL, not the age
        self._leases[lease_id] = renewed
        return renewed

    def release(self, lease_id: str) -> None:
        """Give a slot back and grant it to the oldest waiter. Raises UnknownLease if not held."""
        if self._leases.pop(lease_id, None) is None:
            if self.in_grace:  # granted by the dead host, not yet renewed here
                return
            raise UnknownLease(lease_id)
        self._released += 1
        self._grant_waiters()

    def renew_many(self, lease_ids: list[str]) -> list[str]:
        """Renew every held lease of `lease_ids`; return the ids that are not held (released or reclaimed)."""
        unknown = []
        for lease_id in lease_ids:
            try:
                self.renew(lease_id)
            except UnknownLease:
                unknown.append(lease_id)
        return unknown

    def release_many(self, lease_ids: list[str]) -> list[str]:
        """Release every held lease of `lease_ids`; return the ids that were not held."""
        unknown = []
        for lease_id in lease_ids:
            if self._leases.pop(lease_id, None) is None:
                if not self.in_grace:  # in grace an unknown lease is one the dead host granted
                    unknown.append(lease_id)
            else:
                self._released += 1
        self._grant_waiters()
        return unknown

    def reclaim_expired(self, now: float | None = None) -> list[Lease]:
        """Take back every lease whose expiry is at or before `now`; grant the freed slots to waiters."""
        now = self._clock() if now is None else now
        return self.reclaim([lease.lease_id for lease in self.expiring(now)], now)

    def reclaim(self, lease_ids: list[str] | set[str], now: float | None = None) -> list[Lease]:
        """Take back the held leases among `lease_ids` before they expire (their holder was found dead);
        recorded and counted like expired ones. Grants the freed slots to waiters."""
        now = self._clock() if now is None else now
        taken = [self._leases.pop(lease_id) for lease_id in lease_ids if lease_id in self._leases]
        self._reclaims.extend(Reclaim(lease, now) for lease in taken)
        self._expired += len(taken)
        self._grant_waiters()
        return taken

    def resize(self, capacity: int) -> None:
        """Change the capacity at once. Growing grants to waiters; shrinking revokes no lease."""
        self._capacity = check_capacity(capacity)
        self._grant_waiters()

    def stats(self) -> ThrottleStats:
        waits_s = sorted(self._waits_s)
        return ThrottleStats(
            capacity=self._capacity,
            in_flight=len(self._leases),
            waiting=len(self._waiters),
            granted=self._granted,
            released=self._released,
            expired=self._expired,
            peak_in_flight=self._peak,
            wait_p50_s=_percentile(waits_s, 0.50),
            wait_p90_s=_percentile(waits_s, 0.90),
            wait_p99_s=_percentile(waits_s, 0.99),
        )

    def _adopt(self, lease_id: str) -> Lease | None:
        """During the grace period, take a lease granted before the restart back into the table."""
        holder = lease_id.partition(":")[2]
        if not self.in_grace or not holder:
            return None
        now = self._clock()
        lease = self._leases[lease_id] = Lease(lease_id, holder, now, now + self._ttl_s, self._ttl_s)
        self._adopted += 1
        self._granted += 1  # keeps granted == in_flight + released + expired
        self._peak = max(self._peak, len(self._leases))
        return lease

    def _grant(self, holder: str, waited_s: float) -> Lease:
        now = self._clock()
        lease = Lease(f"{self._id_prefix}{self._next_id}:{holder}", holder, now, now + self._ttl_s, self._ttl_s)
        self._next_id += 1
        self._leases[lease.lease_id] = lease
        self._granted += 1
        self._peak = max(self._peak, len(self._leases))
        self._waits_s.append(waited_s)
        return lease

    def _grant_waiters(self) -> None:
        """Grant the head of the queue while its whole request fits (strict FIFO: nobody overtakes it)."""
        while self._waiters and not self.in_grace:
            ticket, (holder, count, since) = next(iter(self._waiters.items()))
            if len(self._leases) + count > self._capacity:
                return
            del self._waiters[ticket]
            waited_s = self._clock() - since
            self._outbox.extend((ticket, self._grant(holder, waited_s)) for _ in range(count))

    def _check_count(self, count: object) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"a throttle request asks for an integer >= 1 of slots, got {count!r}")
        if count > self._capacity:
            raise ValueError(
                f"a throttle request for {count} slots at once can never be granted: the capacity is "
                f"{self._capacity}; fix: send at most [backend].max_concurrent requests at once, or raise it"
            )


def _check_holder(holder: object) -> None:
    if not isinstance(holder, str) or not holder:
        raise ValueError(f"throttle holder must be a non-empty string (a run id), got {holder!r}")
