"""A process's link to one throttle actor: batched calls and three daemon threads, around its local pool.

Single-slot holds are served from the process's local pool of slots (`pool.LocalPool`, whose doc says
which slots it keeps and which go back); the channel sends what the pool asks for, all asks of a moment
in one `exchange` call. A long `poll_pool` call collects grants and returns early when the process's
`PoolState` changes.

Batches (`count > 1`, an engine sending many requests at once) are one all-or-nothing request to the
actor and go back to it on release. Every lease the process holds, pooled or not, is renewed by the
process's `LeaseKeeper` in one call per period. Threads: a sender (exchange calls; one in flight, so
batches grow with load; it also times idle slots), a poller and the keeper, all started on demand.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

import ray
import ray.exceptions

from retrain_ray.throttle.keeper import RPC_TIMEOUT_S, lease_keeper
from retrain_ray.throttle.pool import Future, LocalPool, OnLost, Waiter
from retrain_ray.throttle.types import Lease, PoolState, ThrottleTimeout

__all__ = ["POLL_S", "Channel", "channel"]

log = logging.getLogger(__name__)

POLL_S = 5.0  # longest a poll waits on the actor before asking again
ERROR_PAUSE_S = 1.0  # after a failed call to the actor, before the next one


class Channel(LocalPool):
    """This process's pool of slots of one throttle actor, and its batched link to the actor."""

    def __init__(self, actor_handle: Any) -> None:
        super().__init__(lease_keeper(actor_handle))
        self._actor = actor_handle
        self._session = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._threads: dict[str, threading.Thread] = {}
        self.submit_calls = self.poll_calls = 0

    # -- called by ThrottleClient ------------------------------------------------------------------

    def acquire(self, holder: str, count: int, timeout_s: float, ttl_s: float, on_lost: OnLost) -> Future:
        """Ask for `count` slots; the future resolves to the leases or to the actor's error."""
        future: Future = Future()
        with self._cond:
            self._ttl_s = min(self._ttl_s, ttl_s)
            if count == 1:
                self._acquire_one(Waiter(future, holder, on_lost), timeout_s)
            else:
                request_id = next(self._ids)
                self._batches[request_id] = (future, on_lost)
                self._requests.append((request_id, holder, count, timeout_s))
            self._kick()
        return future

    def release(self, leases: list[Lease]) -> Future | None:
        """Give slots back; a future of the ids the actor did not hold when they went to the actor."""
        with self._cond:
            ids = [lease.lease_id for lease in leases]
            if len(ids) == 1 and ids[0] in self._in_use:
                slot = self._in_use.pop(ids[0])
                if not self._may_reuse(slot):
                    return self._give_back([slot.lease], Future())
                self._place(slot)
                went_idle = slot.lease.lease_id in self._idle
            else:
                if not self._batch_leases.intersection(ids):
                    return None  # a pooled lease that was lost while held: nothing left to give back
                self._batch_leases.difference_update(ids)
                return self._give_back(leases, Future())
        if went_idle:  # nobody here waited for it: give this process's other threads a turn (fairness)
            time.sleep(0)
        return None

    def release_idle(self) -> Future | None:
        """Give every idle slot back now; the ack of that call, or None when none was idle."""
        with self._cond:
            if not self._idle:
                return None
            slots = list(self._idle.values())
            self._idle.clear()
            return self._give_back([slot.lease for slot in slots], Future())

    def forget(self, future: Future) -> Future | None:
        """The caller stopped waiting for `future`; returns the ack of withdrawing its surplus asks."""
        with self._cond:
            self._waiters.remove(lambda w: w.future is future)
            self._batches = {rid: entry for rid, entry in self._batches.items() if entry[0] is not future}
            surplus = sorted(self._asks)[len(self._waiters):]
            if not surplus:
                return None
            self._asks.difference_update(surplus)
            self._cancels += surplus
            ack: Future = Future()
            self._releases.append(([], ack))
            self._kick()
            return ack

    def timed_out(self, waited_s: float) -> ThrottleTimeout | None:
        """The error of a local hold that got no slot in time (None: the actor never answered)."""
        state = self._state
        return ThrottleTimeout(state.endpoint, state.capacity, waited_s) if state else None

    # -- threads -----------------------------------------------------------------------------------

    def _kick(self) -> None:
        for role, target in (("sender", self._send_forever), ("poller", self._poll_forever)):
            thread = self._threads.get(role)
            if thread is None or not thread.is_alive():
                self._threads[role] = threading.Thread(target=target, name=f"throttle-{role}", daemon=True)
                self._threads[role].start()
        self._cond.notify_all()

    def _send_forever(self) -> None:
        while True:
            with self._cond:
                while not (self._requests or self._releases or self._cancels):
                    self._settle()
                    if self._requests or self._releases or self._cancels:
                        break
                    self._cond.wait(self._idle_wait_s())
                requests, self._requests = self._requests, []
                releases, self._releases = self._releases, []
                cancels, self._cancels = self._cancels, []
            lease_ids = [lease_id for ids, _ in releases for lease_id in ids]
            try:
                unknown, outcomes, state = ray.get(
                    self._actor.exchange.remote(self._session, lease_ids, requests, cancels), timeout=RPC_TIMEOUT_S)
                self.submit_calls += 1
            except SystemExit:
                return
            except Exception as err:
                self._actor_failed("exchange", err)
                for _, ack in releases:
                    if ack is not None:
                        ack.set_exception(err)
                time.sleep(ERROR_PAUSE_S)
                continue
            self._apply_reply(outcomes, state)
            for ids, ack in releases:
                if ack is not None:
                    ack.set_result([lease_id for lease_id in ids if lease_id in unknown])

    def _apply_reply(self, outcomes: list[tuple[int, list[Lease] | BaseException]], state: PoolState) -> None:
        with self._cond:
            for request_id, outcome in outcomes:
                self._resolve(request_id, outcome)
            self._update(state)

    def _actor_failed(self, call: str, err: Exception) -> None:
        log.warning("throttle %s failed: %s", call, err)
        with self._cond:
            self._fail_all(err)

    def _poll_forever(self) -> None:
        while True:
            with self._cond:
                while not (self._batches or self._asks or self._in_use or self._idle or self._waiters):
                    self._cond.wait()
                told = self._state.key() if self._state is not None else None
            try:
                outcomes, state = ray.get(self._actor.poll_pool.remote(self._session, POLL_S, told),
                                          timeout=POLL_S + RPC_TIMEOUT_S)
                self.poll_calls += 1
            except ray.exceptions.GetTimeoutError:
                continue
            except SystemExit:  # ray.shutdown() in this process
                return
            except Exception as err:  # the actor died: nobody will be granted
                self._actor_failed("poll", err)
                time.sleep(ERROR_PAUSE_S)
                continue
            self._apply_reply(outcomes, state)


_channels: dict[tuple[int, str], Channel] = {}
_channels_lock = threading.Lock()


def channel(actor_handle: Any) -> Channel:
    """This process's channel to the throttle actor behind `actor_handle`."""
    key = (os.getpid(), actor_handle._actor_id.hex())
    with _channels_lock:
        found = _channels.get(key)
        if found is None:
            found = _channels[key] = Channel(actor_handle)
        return found
