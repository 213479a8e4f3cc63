"""Clients of the throttle actor: hold slots around calls to a shared endpoint.

`ThrottleClient.hold()` (sync) and `hold_async()` (async) acquire a lease and release it on exit,
exceptions included; `hold_many(n)` / `hold_many_async(n)` take n slots in one call (an engine sending
n requests at once, all or nothing). All clients of one process share the process's `Channel`
(`retrain_ray.throttle.channel`): single-slot holds are served from a local pool of slots that the
actor lets the process keep (a hand-over between two local holds costs no call), batches go to the
actor as one request, and the process's `LeaseKeeper` renews every lease it holds in one call per
TTL/3, so holding costs no thread, task or RPC per hold. A lease lost while held (the actor reclaimed
it, e.g. after a long stall of this process) is logged and counted in its client's `lost_leases`; the
body is not interrupted.

`NoThrottle` has the same interface and never waits: the default for standalone runs, as in the
original (spec section 6, `NoOpThrottle`). Every remote call waits with a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from retrain_ray.throttle.channel import POLL_S, Channel, channel
from retrain_ray.throttle.keeper import RPC_TIMEOUT_S, LeaseKeeper, lease_keeper
from retrain_ray.throttle.types import Lease

if TYPE_CHECKING:
    from retrain_ray.config.sections_training import BackendSection

__all__ = ["POLL_S", "RPC_TIMEOUT_S", "Channel", "LeaseKeeper", "NoThrottle", "ThrottleClient", "channel",
           "lease_keeper"]

log = logging.getLogger(__name__)


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
    def from_config(cls, actor_handle: Any, holder: str, backend: BackendSection) -> ThrottleClient:
        """Timeouts from `[backend].acquire_timeout_s` and `[backend].lease_ttl_s`."""
        return cls(actor_handle, holder, timeout_s=backend.acquire_timeout_s, lease_ttl_s=backend.lease_ttl_s)

    @contextlib.contextmanager
    def hold(self) -> Iterator[Lease]:
        """Hold one slot for the body; the process's keeper renews it; release on exit."""
        with self.hold_many(1) as (lease,):
            yield lease

    @contextlib.contextmanager
    def hold_many(self, count: int) -> Iterator[list[Lease]]:
        """Hold `count` slots at once (all or nothing, FIFO) for the body; release them together on exit."""
        leases = self._acquire(_check_count(count))
        try:
            yield leases
        finally:
            self._release(leases)

    @contextlib.asynccontextmanager
    async def hold_async(self) -> AsyncIterator[Lease]:
        """Hold one slot for the body without blocking the event loop; release on exit."""
        async with self.hold_many_async(1) as (lease,):
            yield lease

    @contextlib.asynccontextmanager
    async def hold_many_async(self, count: int) -> AsyncIterator[list[Lease]]:
        """`hold_many` for asyncio code."""
        leases = await self._acquire_async(_check_count(count))
        try:
            yield leases
        finally:
            await self._release_async(leases)

    def release_idle(self) -> None:
        """Give this process's idle pooled slots back now, e.g. when a run ends (its process may exit
        before they would idle out, and would then keep them until the lease TTL). Never raises."""
        ack = channel(self._actor).release_idle()
        try:
            if ack is not None:
                ack.result(timeout=RPC_TIMEOUT_S)
        except Exception as err:  # the slots then come back after the lease TTL
            log.warning("throttle: idle slots of %s not given back at once: %s", self.holder, err)

    def _wait_s(self, count: int) -> float:
        """A single slot times out here; a batch's ThrottleTimeout comes from the actor (plus slack)."""
        return self.timeout_s if count == 1 else self.timeout_s + RPC_TIMEOUT_S

    def _acquire(self, count: int) -> list[Lease]:
        link, started = channel(self._actor), time.monotonic()
        future = link.acquire(self.holder, count, self.timeout_s, self.lease_ttl_s, self._lost)
        try:
            result = future.result(timeout=self._wait_s(count))
        except TimeoutError:  # ThrottleTimeout is one too: only an unresolved future means no answer
            if future.done():
                raise
            withdrawn = link.forget(future)
            if future.done() and not future.cancelled() and future.exception() is None:
                result = future.result()  # granted while we gave up: take it
            else:
                if withdrawn is not None:
                    withdrawn.result(timeout=RPC_TIMEOUT_S)  # no ghost request left at the actor
                raise self._timed_out(link, started, count) from None
        return result if count > 1 else [result]

    async def _acquire_async(self, count: int) -> list[Lease]:
        link, started = channel(self._actor), time.monotonic()
        future = link.acquire(self.holder, count, self.timeout_s, self.lease_ttl_s, self._lost)
        try:
            result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self._wait_s(count))
        except TimeoutError:
            if future.done() and future.exception() is not None:
                raise
            withdrawn = link.forget(future)
            if future.done() and not future.cancelled() and future.exception() is None:
                result = future.result()
            else:
                if withdrawn is not None:
                    await asyncio.wait_for(asyncio.wrap_future(withdrawn), RPC_TIMEOUT_S)
                raise self._timed_out(link, started, count) from None
        except asyncio.CancelledError:
            link.forget(future)
            if future.done() and not future.cancelled() and future.exception() is None:
                await self._release_async(future.result() if count > 1 else [future.result()])
            raise
        return result if count > 1 else [result]

    def _timed_out(self, link: Channel, started: float, count: int) -> TimeoutError:
        if count == 1:
            err = link.timed_out(time.monotonic() - started)
            if err is not None:
                return err
        return TimeoutError(
            f"throttle actor did not answer an acquire for {self.holder!r} within "
            f"{self._wait_s(count):.0f} s; is the campaign driver (which owns it) alive?"
        )

    def _release(self, leases: list[Lease]) -> None:
        ack = channel(self._actor).release(leases)
        if ack is not None:
            self._warn_unknown(ack.result(timeout=2 * RPC_TIMEOUT_S))

    async def _release_async(self, leases: list[Lease]) -> None:
        ack = channel(self._actor).release(leases)
        if ack is not None:
            self._warn_unknown(await asyncio.wait_for(asyncio.wrap_future(ack), 2 * RPC_TIMEOUT_S))

    def _warn_unknown(self, unknown: list[str]) -> None:
        for lease_id in unknown:
            log.warning("throttle lease %s of %s was reclaimed before release", lease_id, self.holder)

    def _lost(self, lease: Lease) -> None:
        self.lost_leases += 1
        log.warning(
            "throttle lease %s of %s was reclaimed while held (not renewed within %.1f s); the endpoint "
            "may see one call more than its capacity; raise [backend].lease_ttl_s if this process stalls",
            lease.lease_id, self.holder, lease.ttl_s,
        )


def _check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"a throttle request asks for an integer >= 1 of slots, got {count!r}")
    return count


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
