"""Clients of the throttle actor: hold slots around calls to a shared endpoint.

`ThrottleClient.hold()` (sync) and `hold_async()` (async) acquire a lease and release it on exit,
exceptions included; `hold_many(n)` / `hold_many_async(n)` take n slots in one call (an engine sending
n requests at once). All clients of one process talk to the actor through the process's `Channel`:
a sender thread ships every pending acquire and release in one `submit` call (one in flight at a
time, so batches grow with load), and a poller thread collects every grant in one `poll` call. A
hold waits for its grant and, on exit, for the acknowledgement of the batch that carried its release. While held, leases are renewed by the process's `LeaseKeeper`: one thread per
process and throttle actor that renews *every* lease the process holds in one `renew_many` call every
TTL/3 (TTL the smallest of the held leases' and their clients' `lease_ttl_s`), so holding costs no
thread, task or RPC per hold. A lease lost while held (the actor reclaimed it, e.g. after a long stall
of this process) is logged and counted in its client's `lost_leases`; the body is not interrupted.

`NoThrottle` has the same interface and never waits: the default for standalone runs, as in the
original (spec section 6, `NoOpThrottle`). Every remote call waits with a timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import math
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from retrain_ray.throttle.types import Lease

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

__all__ = ["Channel", "LeaseKeeper", "NoThrottle", "ThrottleClient", "channel", "lease_keeper"]

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 30.0  # renew/release answer time, and slack on top of the acquire timeout
POLL_S = 5.0  # longest a poll waits on the actor before asking again


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


class Channel:
    """This process's batched link to one throttle actor: a sender and a poller thread, run on demand."""

    def __init__(self, actor_handle: Any) -> None:
        self._actor = actor_handle
        self._session = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._requests: list[tuple[int, str, int, float]] = []
        self._releases: list[tuple[list[str], concurrent.futures.Future]] = []
        self._waiting: dict[int, concurrent.futures.Future] = {}
        self._threads: dict[str, threading.Thread] = {}
        self.submit_calls = self.poll_calls = 0

    def acquire(self, holder: str, count: int, timeout_s: float) -> concurrent.futures.Future:
        """Queue a request for `count` slots; the future resolves to its leases or its error."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            request_id = next(self._ids)
            self._waiting[request_id] = future
            self._requests.append((request_id, holder, count, timeout_s))
            self._start("sender", self._send_forever)
            self._start("poller", self._poll_forever)
            self._cond.notify_all()
        return future

    def forget(self, future: concurrent.futures.Future) -> None:
        """The caller stopped waiting: a grant that still arrives for it is released."""
        with self._cond:
            for request_id, waiting in list(self._waiting.items()):
                if waiting is future:
                    del self._waiting[request_id]

    def release(self, lease_ids: list[str]) -> concurrent.futures.Future:
        """Queue a release; the future resolves to the ids the actor did not hold, once it got them."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            self._releases.append((lease_ids, future))
            self._start("sender", self._send_forever)
            self._cond.notify_all()
        return future

    def _start(self, role: str, target: Callable[[], None]) -> None:
        thread = self._threads.get(role)
        if thread is None or not thread.is_alive():
            self._threads[role] = threading.Thread(target=target, name=f"throttle-{role}", daemon=True)
            self._threads[role].start()

    def _send_forever(self) -> None:
        while True:
            with self._cond:
                while not (self._requests or self._releases):
                    self._cond.wait()
                requests, self._requests = self._requests, []
                releases, self._releases = self._releases, []
            lease_ids = [lease_id for ids, _ in releases for lease_id in ids]
            try:
                unknown = set(ray.get(self._actor.submit.remote(self._session, lease_ids, requests),
                                      timeout=RPC_TIMEOUT_S))
                self.submit_calls += 1
            except Exception as err:  # the actor is gone or stuck: fail these callers, keep serving
                self._fail([request_id for request_id, *_ in requests], err)
                for _, future in releases:
                    future.set_exception(err)
                continue
            for ids, future in releases:
                future.set_result([lease_id for lease_id in ids if lease_id in unknown])

    def _poll_forever(self) -> None:
        while True:
            with self._cond:
                while not self._waiting:
                    self._cond.wait()
            try:
                outcomes = ray.get(self._actor.poll.remote(self._session, POLL_S), timeout=POLL_S + RPC_TIMEOUT_S)
                self.poll_calls += 1
            except ray.exceptions.GetTimeoutError:
                continue
            except Exception as err:  # the actor died: nobody will be granted
                with self._cond:
                    waiting = list(self._waiting)
                self._fail(waiting, err)
                continue
            for request_id, outcome in outcomes:
                self._resolve(request_id, outcome)

    def _resolve(self, request_id: int, outcome: list[Lease] | BaseException) -> None:
        with self._cond:
            future = self._waiting.pop(request_id, None)
        if future is not None and future.set_running_or_notify_cancel():
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        elif isinstance(outcome, list):  # its caller gave up: pass the slots on
            self.release([lease.lease_id for lease in outcome])

    def _fail(self, request_ids: list[int], err: BaseException) -> None:
        for request_id in request_ids:
            with self._cond:
                future = self._waiting.pop(request_id, None)
            if future is not None and future.set_running_or_notify_cancel():
                future.set_exception(err)


_channels: dict[tuple[int, str], Channel] = {}


def channel(actor_handle: Any) -> Channel:
    """This process's channel to the throttle actor behind `actor_handle`."""
    key = (os.getpid(), actor_handle._actor_id.hex())
    with _keepers_lock:
        found = _channels.get(key)
        if found is None:
            found = _channels[key] = Channel(actor_handle)
        return found


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
    def from_config(cls, actor_handle: Any, holder: str, cfg: RetrainConfig) -> ThrottleClient:
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

    def _no_answer(self) -> TimeoutError:
        return TimeoutError(
            f"throttle actor did not answer an acquire for {self.holder!r} within "
            f"{self.timeout_s + RPC_TIMEOUT_S:.0f} s; is the campaign driver (which owns it) alive?"
        )

    def _acquire(self, count: int) -> list[Lease]:
        link = channel(self._actor)
        future = link.acquire(self.holder, count, self.timeout_s)
        try:
            return future.result(timeout=self.timeout_s + RPC_TIMEOUT_S)
        except TimeoutError:  # ThrottleTimeout is one too: only an unresolved future means no answer
            if future.done():
                raise
            link.forget(future)
            raise self._no_answer() from None

    async def _acquire_async(self, count: int) -> list[Lease]:
        link = channel(self._actor)
        future = link.acquire(self.holder, count, self.timeout_s)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=self.timeout_s + RPC_TIMEOUT_S)
        except TimeoutError:
            if future.done():
                raise
            link.forget(future)
            raise self._no_answer() from None
        except asyncio.CancelledError:
            link.forget(future)
            raise

    def _release(self, leases: list[Lease]) -> None:
        future = channel(self._actor).release([lease.lease_id for lease in leases])
        self._warn_unknown(future.result(timeout=2 * RPC_TIMEOUT_S), leases)

    async def _release_async(self, leases: list[Lease]) -> None:
        future = channel(self._actor).release([lease.lease_id for lease in leases])
        self._warn_unknown(await asyncio.wait_for(asyncio.wrap_future(future), 2 * RPC_TIMEOUT_S), leases)

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
