"""Clients of the throttle actor: hold slots around calls to a shared endpoint.

`ThrottleClient.hold()` (sync) and `hold_async()` (async) acquire a lease and release it on exit,
exceptions included; `hold_many(n)` / `hold_many_async(n)` take n slots in one call (an engine sending
n requests at once). While held, leases are renewed by the process's `LeaseKeeper`: one thread per
process and throttle actor that renews *every* lease the process holds in one `renew_many` call every
TTL/3 (TTL the smallest of the held leases' and their clients' `lease_ttl_s`), so holding costs no
thread, task or RPC per hold. A lease lost while held (the actor reclaimed it, e.g. after a long stall
of this process) is logged and counted in its client's `lost_leases`; the body is not interrupted.

`NoThrottle` has the same interface and never waits: the default for standalone runs, as in the
original (spec section 6, `NoOpThrottle`). Every remote call waits with a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import ray

from retrain_ray.throttle.errors import ThrottleTimeout, UnknownLease
from retrain_ray.throttle.types import Lease

__all__ = ["LeaseKeeper", "NoThrottle", "ThrottleClient", "lease_keeper"]

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 30.0  # renew/release answer time, and slack on top of the acquire timeout


def _unwrap(err: BaseException) -> BaseException:
    """The original exception inside a RayTaskError (Ray subclasses the cause; `.cause` is clean)."""
    return getattr(err, "cause", None) or err


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


class ThrottleClient:
    """Holds slots of one throttle actor on behalf of `holder` (a run id). Picklable: no live state."""

    def __init__(
        self, actor_handle: Any, holder: str, *, timeout_s: float = 600.0, lease_ttl_s: float = 30.0
    ) -> None:
        if not isinstance(holder, str) or not holder:
            raise ValueError(f"throttle holder must be a non-empty string (a run id), got {holder!r}")
        self._actor = actor_handle
        self.holder = holder
        self.timeout_s = float(timeout_s)
        self.lease_ttl_s = float(lease_ttl_s)
        self.lost_leases = 0

    @classmethod
    def from_config(cls, actor_handle: Any, holder: str, cfg: Any) -> ThrottleClient:
        """Timeouts from `[backend].acquire_timeout_s` and `[backend].lease_ttl_s`."""
        backend = cfg.backend
        return cls(actor_handle, holder, timeout_s=backend.acquire_timeout_s, lease_ttl_s=backend.lease_ttl_s)

    @contextlib.contextmanager
    def hold(self) -> Iterator[Lease]:
        """Hold one slot for the body; the process's keeper renews it; release on exit."""
        with self.hold_many(1) as (lease,):
            yield lease

    @contextlib.contextmanager
    def hold_many(self, count: int) -> Iterator[list[Lease]]:
        """Hold `count` slots at once (all or nothing, FIFO) for the body; release them together on exit."""
        leases = self._acquire(count)
        keeper = lease_keeper(self._actor)
        keeper.add(leases, self.lease_ttl_s, self._lost)
        try:
            yield leases
        finally:
            keeper.discard(leases)
            self._release(leases)

    @contextlib.asynccontextmanager
    async def hold_async(self) -> AsyncIterator[Lease]:
        """Hold one slot for the body without blocking the event loop; release on exit."""
        async with self.hold_many_async(1) as (lease,):
            yield lease

    @contextlib.asynccontextmanager
    async def hold_many_async(self, count: int) -> AsyncIterator[list[Lease]]:
        """`hold_many` for asyncio code."""
        leases = await self._acquire_async(count)
        keeper = lease_keeper(self._actor)
        keeper.add(leases, self.lease_ttl_s, self._lost)
        try:
            yield leases
        finally:
            keeper.discard(leases)
            await self._release_async(leases)

    def _acquire_ref(self, count: int) -> Any:
        if count == 1:
            return self._actor.acquire.remote(self.holder, self.timeout_s)
        return self._actor.acquire_many.remote(self.holder, count, self.timeout_s)

    def _no_answer(self) -> TimeoutError:
        return TimeoutError(
            f"throttle actor did not answer an acquire for {self.holder!r} within "
            f"{self.timeout_s + RPC_TIMEOUT_S:.0f} s; is the campaign driver (which owns it) alive?"
        )

    def _acquire(self, count: int) -> list[Lease]:
        ref = self._acquire_ref(count)
        try:
            granted = ray.get(ref, timeout=self.timeout_s + RPC_TIMEOUT_S)
        except ThrottleTimeout as err:
            raise _unwrap(err) from None
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref)
            raise self._no_answer() from None
        return [granted] if count == 1 else granted

    async def _acquire_async(self, count: int) -> list[Lease]:
        ref = self._acquire_ref(count)
        try:
            granted = await asyncio.wait_for(ref, timeout=self.timeout_s + RPC_TIMEOUT_S)
        except ThrottleTimeout as err:
            raise _unwrap(err) from None
        except asyncio.TimeoutError:
            ray.cancel(ref)
            raise self._no_answer() from None
        return [granted] if count == 1 else granted

    def _release_ref(self, leases: list[Lease]) -> Any:
        if len(leases) == 1:
            return self._actor.release.remote(leases[0].lease_id)
        return self._actor.release_many.remote([lease.lease_id for lease in leases])

    def _release(self, leases: list[Lease]) -> None:
        try:
            self._warn_unknown(ray.get(self._release_ref(leases), timeout=RPC_TIMEOUT_S), leases)
        except UnknownLease:
            self._warn_unknown([leases[0].lease_id], leases)

    async def _release_async(self, leases: list[Lease]) -> None:
        try:
            unknown = await asyncio.wait_for(self._release_ref(leases), timeout=RPC_TIMEOUT_S)
            self._warn_unknown(unknown, leases)
        except UnknownLease:
            self._warn_unknown([leases[0].lease_id], leases)

    def _warn_unknown(self, unknown: list[str] | None, leases: list[Lease]) -> None:
        for lease_id in unknown or ():
            log.warning("throttle lease %s of %s was reclaimed before release", lease_id, self.holder)

    def _lost(self, lease: Lease) -> None:
        self.lost_leases += 1
        log.warning(
            "throttle lease %s of %s was reclaimed while held (not renewed within %.1f s); the endpoint "
            "may see one call more than its capacity; raise [backend].lease_ttl_s if this process stalls",
            lease.lease_id, self.holder, lease.ttl_s,
        )


class NoThrottle:
    """A throttle that never waits (standalone runs). Same interface as ThrottleClient; yields None."""

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        yield None

    @contextlib.asynccontextmanager
    async def hold_async(self) -> AsyncIterator[None]:
        yield None

    @contextlib.contextmanager
    def hold_many(self, count: int) -> Iterator[list[None]]:
        yield [None] * count

    @contextlib.asynccontextmanager
    async def hold_many_async(self, count: int) -> AsyncIterator[list[None]]:
        yield [None] * count
