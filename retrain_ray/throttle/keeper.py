"""The per-process lease keeper: renews every lease a process holds from one throttle actor in one call.

One daemon thread per process and throttle actor, running only while leases are held, renews them all
with one `renew_many` call every TTL/3 (TTL the smallest of the held leases' and their clients'
`lease_ttl_s`), so holding costs no thread, task or RPC per hold. A lease the actor reports unknown
while still kept here was lost (reclaimed after a stall of this process), not released: its `on_lost`
callback is called.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import Any

import ray

from retrain_ray.throttle.types import Lease

__all__ = ["RPC_TIMEOUT_S", "LeaseKeeper", "lease_keeper"]

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 30.0  # renew/release answer time, and slack on top of the acquire timeout


class LeaseKeeper:
    """Renews every lease this process holds from one throttle actor, in one call per period.

    Its daemon thread runs only while leases are held. A lease is added after its grant and discarded
    before its release, so a lease the actor reports unknown while still here was lost, not released.
    """

    def __init__(self, actor_handle: Any) -> None:
        self._actor = actor_handle
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Lease, float, Callable[[Lease], None]]] = {}  # id -> lease, period, on_lost
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None
        self.renew_calls = 0

    @property
    def held(self) -> int:
        return len(self._held)

    def add(self, leases: list[Lease], max_ttl_s: float, on_lost: Callable[[Lease], None]) -> None:
        """Keep `leases` alive from now on (renewed every min(lease TTL, max_ttl_s) / 3)."""
        with self._lock:
            shortest = self._period_s()
            for lease in leases:
                self._held[lease.lease_id] = (lease, min(lease.ttl_s, max_ttl_s) / 3, on_lost)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="throttle-lease-keeper", daemon=True)
                self._thread.start()
            elif self._period_s() < shortest:
                self._changed.set()  # wake the sleeping thread to renew on the shorter period

    def discard(self, leases: list[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._held.pop(lease.lease_id, None)

    def _period_s(self) -> float:
        return min((period for _, period, _ in self._held.values()), default=math.inf)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._held:
                    self._thread = None
                    return
                period_s = self._period_s()
            if self._changed.wait(period_s):
                self._changed.clear()
                continue
            self._renew_once()

    def _renew_once(self) -> None:
        with self._lock:
            lease_ids = list(self._held)
        if not lease_ids:
            return
        try:
            unknown = ray.get(self._actor.renew_many.remote(lease_ids), timeout=RPC_TIMEOUT_S)
            self.renew_calls += 1
        except Exception as err:  # transient (actor busy, network): try again next period
            log.warning("throttle renewal of %d leases failed: %s", len(lease_ids), err)
            return
        for lease_id in unknown:
            with self._lock:
                entry = self._held.pop(lease_id, None)
            if entry is not None:  # still held by the body: lost, not released
                entry[2](entry[0])


_keepers: dict[str, LeaseKeeper] = {}
_keepers_lock = threading.Lock()


def lease_keeper(actor_handle: Any) -> LeaseKeeper:
    """This process's lease keeper for the throttle actor behind `actor_handle`."""
    key = actor_handle._actor_id.hex()  # handles of one actor (each unpickled copy) share its id
    with _keepers_lock:
        keeper = _keepers.get(key)
        if keeper is None:
            keeper = _keepers[key] = LeaseKeeper(actor_handle)
        return keeper
