"""Clients of the throttle actor: hold a slot around a call to a shared endpoint.

`ThrottleClient.hold()` (sync) and `hold_async()` (async) acquire a lease, renew it in the background
while the body runs (a daemon thread, or an asyncio task, every TTL/3 where TTL is the smaller of the
granted lease's and the client's `lease_ttl_s`), and release it on exit, exceptions included. A lease
lost while held (renewal refused because the actor reclaimed it, e.g. after a long stall of this
process) is logged and counted in `lost_leases`; the body is not interrupted.

`NoThrottle` has the same interface and never waits: the default for standalone runs, as in the
original (spec section 6, `NoOpThrottle`). Every remote call waits with a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import ray

from retrain_ray.throttle.errors import ThrottleTimeout, UnknownLease
from retrain_ray.throttle.types import Lease

__all__ = ["NoThrottle", "ThrottleClient"]

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 30.0  # renew/release answer time, and slack on top of the acquire timeout


def _unwrap(err: BaseException) -> BaseException:
    """The original exception inside a RayTaskError (Ray subclasses the cause; `.cause` is clean)."""
    return getattr(err, "cause", None) or err


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
        """Hold one slot for the body; renew from a thread; release on exit."""
        lease = self._acquire()
        stop = threading.Event()
        renewer = threading.Thread(
            target=self._renew_until, args=(lease, stop), name=f"throttle-renew-{self.holder}", daemon=True
        )
        renewer.start()
        try:
            yield lease
        finally:
            stop.set()
            renewer.join(timeout=RPC_TIMEOUT_S)
            self._release(lease)

    @contextlib.asynccontextmanager
    async def hold_async(self) -> AsyncIterator[Lease]:
        """Hold one slot for the body; renew from an asyncio task; release on exit."""
        lease = await self._acquire_async()
        renewer = asyncio.get_running_loop().create_task(self._renew_forever_async(lease))
        try:
            yield lease
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await self._release_async(lease)

    def _renew_period_s(self, lease: Lease) -> float:
        return min(lease.ttl_s, self.lease_ttl_s) / 3

    def _acquire(self) -> Lease:
        ref = self._actor.acquire.remote(self.holder, self.timeout_s)
        try:
            return ray.get(ref, timeout=self.timeout_s + RPC_TIMEOUT_S)
        except ThrottleTimeout as err:
            raise _unwrap(err) from None
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref)
            raise TimeoutError(
                f"throttle actor did not answer an acquire for {self.holder!r} within "
                f"{self.timeout_s + RPC_TIMEOUT_S:.0f} s; is the campaign driver (which owns it) alive?"
            ) from None

    async def _acquire_async(self) -> Lease:
        ref = self._actor.acquire.remote(self.holder, self.timeout_s)
        try:
            return await asyncio.wait_for(ref, timeout=self.timeout_s + RPC_TIMEOUT_S)
        except ThrottleTimeout as err:
            raise _unwrap(err) from None
        except asyncio.TimeoutError:
            ray.cancel(ref)
            raise TimeoutError(
                f"throttle actor did not answer an acquire for {self.holder!r} within "
                f"{self.timeout_s + RPC_TIMEOUT_S:.0f} s; is the campaign driver (which owns it) alive?"
            ) from None

    def _renew_until(self, lease: Lease, stop: threading.Event) -> None:
        while not stop.wait(self._renew_period_s(lease)):
            try:
                ray.get(self._actor.renew.remote(lease.lease_id), timeout=RPC_TIMEOUT_S)
            except UnknownLease:
                self._lost(lease)
                return
            except Exception as err:  # transient (actor busy, network): try again next period
                log.warning("throttle renew of %s failed: %s", lease.lease_id, err)

    async def _renew_forever_async(self, lease: Lease) -> None:
        while True:
            await asyncio.sleep(self._renew_period_s(lease))
            try:
                await asyncio.wait_for(self._actor.renew.remote(lease.lease_id), timeout=RPC_TIMEOUT_S)
            except UnknownLease:
                self._lost(lease)
                return
            except (asyncio.TimeoutError, ray.exceptions.RayError) as err:
                log.warning("throttle renew of %s failed: %s", lease.lease_id, err)

    def _release(self, lease: Lease) -> None:
        try:
            ray.get(self._actor.release.remote(lease.lease_id), timeout=RPC_TIMEOUT_S)
        except UnknownLease:
            log.warning("throttle lease %s of %s was reclaimed before release", lease.lease_id, self.holder)

    async def _release_async(self, lease: Lease) -> None:
        try:
            await asyncio.wait_for(self._actor.release.remote(lease.lease_id), timeout=RPC_TIMEOUT_S)
        except UnknownLease:
            log.warning("throttle lease %s of %s was reclaimed before release", lease.lease_id, self.holder)

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
