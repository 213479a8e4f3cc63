"""Throttle for shared endpoints: a leased, fair, resizable counting semaphore and its clients.

`semaphore` is the plain algorithm, `retrain_ray.actors.throttle` hosts it in a Ray actor, `client`
holds a slot around a call (`with client.hold(): ...`) through the process's `channel` (a local pool
of slots, batched calls to the actor), and `keeper` renews every lease a process holds in one call.
"""

from typing import TYPE_CHECKING

from retrain_ray.throttle.semaphore import LeasedSemaphore
from retrain_ray.throttle.types import Lease, Reclaim, Throttle, ThrottleStats, ThrottleTimeout, UnknownLease

if TYPE_CHECKING:
    from retrain_ray.throttle.client import NoThrottle, ThrottleClient

__all__ = [
    "Lease",
    "Reclaim",
    "LeasedSemaphore",
    "NoThrottle",
    "Throttle",
    "ThrottleClient",
    "ThrottleStats",
    "ThrottleTimeout",
    "UnknownLease",
]


def __getattr__(name: str):
    """The clients import Ray; load them only when asked, so the algorithm stays importable alone."""
    if name in ("NoThrottle", "ThrottleClient"):
        # deferred: loads ray, which importing this module does not need
        from retrain_ray.throttle import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
