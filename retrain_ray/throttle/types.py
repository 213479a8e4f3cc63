"""Contract of the throttle: leases, statistics, the `Throttle` protocol the run loop uses, and its errors.

Everything here may cross a Ray actor boundary, so it is frozen and picklable. Times in a `Lease`
are read from the clock of whoever granted it (the throttle actor's `time.monotonic`): compare
them with each other, never with a client's clock. The errors pickle by their fields.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Lease:
    """One granted slot. Valid until `expires_at` unless renewed; picklable.

    `ttl_s` is the time to live it was granted with: a renewal sets `expires_at` to its arrival + `ttl_s`
    (never `expires_at - granted_at`, which grows with the lease's age).
    """

    lease_id: str
    holder: str
    granted_at: float
    expires_at: float
    ttl_s: float


@dataclass(frozen=True)
class Reclaim:
    """A lease the throttle took back because it was not renewed: the lease as last renewed (its
    `expires_at - ttl_s` is when the actor last heard from the holder) and when it was reclaimed
    (`reclaimed_at`, the actor's monotonic clock)."""

    lease: Lease
    reclaimed_at: float


@dataclass(frozen=True)
class ThrottleStats:
    """A snapshot of a semaphore. Counters are cumulative since creation; picklable.

    Invariant: `granted == in_flight + released + expired`. `peak_in_flight` is the largest number
    of simultaneous holders ever seen (it may exceed `capacity` only after a shrink, never by a
    grant). Wait times cover every grant, immediate ones counting as 0 s.
    """

    capacity: int
    in_flight: int
    waiting: int
    granted: int
    released: int
    expired: int
    peak_in_flight: int
    wait_p50_s: float
    wait_p90_s: float
    wait_p99_s: float


@dataclass(frozen=True)
class PoolState:
    """What the actor tells one client process about its local pool of slots (see `client.Channel`).

    `others_waiting`: requests of other processes (or batches of this one) are queued, so every slot
    of this process goes back to the actor after a short block of local holds, and idle slots at once.
    `keep` is the most slots the process may keep between holds (hand over locally or keep idle): the
    capacity, 0 while a batch heads the queue (it needs the slots back), fewer than held after a
    shrink. `seq` orders replies that can arrive out of order; `key()` is what a change is judged on.
    `incarnation` changes when the actor forgot the session (it stopped polling): its queued requests
    are gone and the client asks again.
    """

    endpoint: str
    capacity: int
    others_waiting: bool
    keep: int
    seq: int = 0
    incarnation: int = 0

    def key(self) -> tuple[int, bool, int]:
        return (self.capacity, self.others_waiting, self.keep)


@runtime_checkable
class Throttle(Protocol):
    """What the run loop asks of a throttle: hold a slot around every call to a shared endpoint.

    `hold_many(n)` holds n slots at once, for n requests sent together.
    """

    def hold(self) -> AbstractContextManager[Lease | None]: ...

    def hold_async(self) -> AbstractAsyncContextManager[Lease | None]: ...

    def hold_many(self, count: int) -> AbstractContextManager[list[Lease] | list[None]]: ...

    def hold_many_async(self, count: int) -> AbstractAsyncContextManager[list[Lease] | list[None]]: ...


class ThrottleTimeout(TimeoutError):
    """No slot of a shared endpoint was granted within the caller's timeout."""

    def __init__(self, endpoint: str, capacity: int, waited_s: float) -> None:
        self.endpoint = endpoint
        self.capacity = capacity
        self.waited_s = waited_s
        super().__init__(
            f"throttle for endpoint {endpoint!r} (capacity {capacity}) granted no slot after waiting "
            f"{waited_s:.1f} s; fix: raise [backend].max_concurrent (more simultaneous calls) or "
            f"[backend].acquire_timeout_s (wait longer), or run fewer runs against this endpoint at once"
        )

    def __reduce__(self):
        return (type(self), (self.endpoint, self.capacity, self.waited_s))


class UnknownLease(KeyError):
    """A lease id that the semaphore does not hold: never granted, already released, or reclaimed."""

    def __init__(self, lease_id: str) -> None:
        self.lease_id = lease_id
        super().__init__(lease_id)

    def __str__(self) -> str:
        return (
            f"unknown lease {self.lease_id!r}: it was released already, never granted, or reclaimed "
            f"because it was not renewed within its TTL; fix: renew more often than the TTL "
            f"(the throttle client renews every TTL/3) or raise the throttle's lease_ttl_s"
        )

    def __reduce__(self):
        return (type(self), (self.lease_id,))
