"""Errors of the throttle. Both pickle by their fields, so they survive a Ray actor boundary."""

from __future__ import annotations


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
