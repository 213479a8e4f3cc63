"""A process's link to one throttle actor: a local pool of slots, batched calls, three daemon threads.

Single-slot holds are served from a local pool. The channel asks the actor for one slot per local
waiter (all asks of a moment in one `exchange` call), and a released slot goes straight to a local
waiter without a call (the least-served holder first, `fairqueue`), or stays idle for the next local
hold, as long as the process holds no more than the actor's `PoolState.keep`: the whole capacity
while nobody else waits, an equal share per active process while others wait, nothing while a batch
heads the actor's queue or after a shrink. Slots above that go back to the actor, whose FIFO queue
serves everybody's asks, so no process hoards slots while others queue. An idle slot goes back when
others wait or after `IDLE_S`. A long `poll_pool` call collects grants and returns early when the
process's `PoolState` changes.

Batches (`count > 1`, an engine sending many requests at once) are one all-or-nothing request to the
actor and go back to it on release. Every lease the process holds, pooled or not, is renewed by the
process's `LeaseKeeper` in one call per period. Threads: a sender (exchange calls; one in flight, so
batches grow with load; it also times idle slots), a poller and the keeper, all started on demand.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import ray
import ray.exceptions

from retrain_ray.throttle.errors import ThrottleTimeout
from retrain_ray.throttle.fairqueue import FairQueue
from retrain_ray.throttle.keeper import RPC_TIMEOUT_S, lease_keeper
from retrain_ray.throttle.types import Lease, PoolState

__all__ = ["IDLE_S", "POLL_S", "Channel", "channel"]

log = logging.getLogger(__name__)

POLL_S = 5.0  # longest a poll waits on the actor before asking again
IDLE_S = 0.2  # an idle slot nobody else waits for is kept this long for the next local hold
BLOCK_USES = 32  # while others wait, a slot serves at most this many local holds per grant ...
QUANTUM_S = 0.05  # ... and is passed on locally only this long after its grant, then goes back
ERROR_PAUSE_S = 1.0  # after a failed call to the actor, before the next one
CATCH_UP = BLOCK_USES  # holds a holder that fell behind may take ahead of the others (see fairqueue)

OnLost = Callable[[Lease], None]
Future = concurrent.futures.Future


@dataclass
class _Waiter:
    future: Future
    holder: str
    on_lost: OnLost


@dataclass
class _Slot:
    """A slot of the local pool: its lease, when the actor granted it here, local holds served since."""

    lease: Lease
    got_at: float
    uses: int = 0
    on_lost: OnLost | None = None  # of the client holding it now
    idle_since: float = 0.0


class Channel:
    """This process's pool of slots of one throttle actor, and its batched link to the actor."""

    def __init__(self, actor_handle: Any) -> None:
        self._actor = actor_handle
        self._keeper = lease_keeper(actor_handle)
        self._session = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._requests: list[tuple[int, str, int, float]] = []  # to send: (id, holder, count, timeout)
        self._releases: list[tuple[list[str], Future | None]] = []  # to send, with who waits for the ack
        self._cancels: list[int] = []  # asks to withdraw
        self._batches: dict[int, tuple[Future, OnLost]] = {}
        self._batch_leases: set[str] = set()
        self._asks: set[int] = set()  # single-slot requests the actor has not answered yet
        self._ask_timeout_s = 600.0
        self._waiters: FairQueue[_Waiter] = FairQueue(CATCH_UP)  # local single-slot holds, least-served first
        self._idle: dict[str, _Slot] = {}  # by lease id
        self._in_use: dict[str, _Slot] = {}
        self._state: PoolState | None = None
        self._ttl_s = math.inf  # smallest lease_ttl_s of this process's clients
        self._threads: dict[str, threading.Thread] = {}
        self.submit_calls = self.poll_calls = self.local_grants = 0

    # -- called by ThrottleClient ------------------------------------------------------------------

    def acquire(self, holder: str, count: int, timeout_s: float, ttl_s: float, on_lost: OnLost) -> Future:
        """Ask for `count` slots; the future resolves to the leases or to the actor's error."""
        future: Future = Future()
        with self._cond:
            self._ttl_s = min(self._ttl_s, ttl_s)
            if count == 1:
                self._acquire_one(_Waiter(future, holder, on_lost), timeout_s)
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

    # -- the pool (all under self._cond) -----------------------------------------------------------

    def _acquire_one(self, waiter: _Waiter, timeout_s: float) -> None:
        self._ask_timeout_s = timeout_s
        if not self._waiters and self._idle:
            self._hand(self._idle.pop(next(iter(self._idle))), waiter)
            return
        self._waiters.push(waiter.holder, waiter)
        self._ask()

    def _ask(self) -> None:
        """One request to the actor per local waiter not yet covered by one."""
        for waiter in list(self._waiters)[len(self._asks):]:
            request_id = next(self._ids)
            self._asks.add(request_id)
            self._requests.append((request_id, waiter.holder, 1, self._ask_timeout_s))

    def _hand(self, slot: _Slot, waiter: _Waiter) -> bool:
        if not waiter.future.set_running_or_notify_cancel():
            return False  # an async caller gave up
        slot.uses += 1
        self._waiters.charge(waiter.holder)
        slot.on_lost = waiter.on_lost
        self._in_use[slot.lease.lease_id] = slot
        self.local_grants += 1
        waiter.future.set_result(replace(slot.lease, holder=waiter.holder))
        return True

    def _may_reuse(self, slot: _Slot) -> bool:
        """May a released slot serve another local hold? Not above `keep`; while others wait, only
        within its block (BLOCK_USES holds, QUANTUM_S), so slots rotate through the actor's FIFO."""
        state = self._state
        if state is None or self._owned() + 1 > state.keep:
            return False
        spent = slot.uses >= BLOCK_USES or time.monotonic() - slot.got_at >= QUANTUM_S
        return not (state.others_waiting and spent)

    def _place(self, slot: _Slot) -> None:
        """A free slot of ours: the least-served local waiter, else idle (if allowed), else the actor."""
        while self._waiters:
            if self._hand(slot, self._waiters.pop()[1]):
                return
        self._withdraw_asks()  # a free slot and nobody here waits: the asks still queued are surplus
        state = self._state
        if state is not None and not state.others_waiting and self._owned() + 1 <= state.keep:
            slot.idle_since = time.monotonic()
            if not self._idle:  # the sender times idle slots; while one is idle it wakes by itself
                self._cond.notify_all()
            self._idle[slot.lease.lease_id] = slot
        else:
            self._give_back([slot.lease], None)

    def _give_back(self, leases: list[Lease], ack: Future | None) -> Future | None:
        self._keeper.discard(leases)
        self._releases.append(([lease.lease_id for lease in leases], ack))
        self._kick()
        return ack

    def _withdraw_asks(self) -> None:
        """Nobody here waits any more: withdraw the asks still queued at the actor (a grant that
        crosses the withdrawal is passed on when it arrives)."""
        if self._asks:
            self._cancels += self._asks
            self._asks.clear()
            self._kick()

    def _owned(self) -> int:
        return len(self._in_use) + len(self._idle)

    def _keep(self) -> int:
        return self._state.keep if self._state is not None else 0

    def _settle(self) -> None:
        """Give back idle slots that others wait for, that exceed `keep`, or that idled `IDLE_S`."""
        if not self._idle:
            return
        state, now = self._state, time.monotonic()
        excess = self._owned() - self._keep()
        back = []
        for slot in list(self._idle.values()):
            if state is None or state.others_waiting or excess > 0 or now - slot.idle_since >= IDLE_S:
                del self._idle[slot.lease.lease_id]
                back.append(slot.lease)
                excess -= 1
        if back:
            self._give_back(back, None)

    def _update(self, state: PoolState) -> None:
        if self._state is None or state.seq > self._state.seq:
            if self._state is not None and state.incarnation != self._state.incarnation:
                log.warning("throttle actor forgot this process's session; asking again")
                self._asks.clear()  # answers to them will never come
                self._ask()
            self._state = state
            self._settle()

    def _resolve(self, request_id: int, outcome: list[Lease] | BaseException) -> None:
        if request_id in self._asks:
            self._asks.discard(request_id)
            if isinstance(outcome, BaseException):  # expired or dropped: ask again if still needed
                self._ask()
                return
            self._keeper.add(outcome, self._ttl_s, self._lost)
            self._place(_Slot(outcome[0], time.monotonic()))
            return
        future, on_lost = self._batches.pop(request_id, (None, None))
        if future is not None and on_lost is not None and future.set_running_or_notify_cancel():
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
                return
            self._keeper.add(outcome, self._ttl_s, on_lost)
            self._batch_leases.update(lease.lease_id for lease in outcome)
            future.set_result(outcome)
        elif isinstance(outcome, list):  # nobody waits for it any more: pass the slots on
            self._releases.append(([lease.lease_id for lease in outcome], None))
            self._kick()

    def _lost(self, lease: Lease) -> None:
        """The keeper found a pooled lease reclaimed (this process stalled past the TTL)."""
        with self._cond:
            self._idle.pop(lease.lease_id, None)
            slot = self._in_use.pop(lease.lease_id, None)
        if slot is not None and slot.on_lost is not None:
            slot.on_lost(slot.lease)

    def _fail_all(self, err: BaseException) -> None:
        """The actor is gone or stuck: every waiting caller gets `err`."""
        futures = [w.future for w in self._waiters.clear()] + [f for f, _ in self._batches.values()]
        self._batches.clear()
        self._asks.clear()
        for future in futures:
            if future.set_running_or_notify_cancel():
                future.set_exception(err)

    # -- threads -----------------------------------------------------------------------------------

    def _kick(self) -> None:
        for role, target in (("sender", self._send_forever), ("poller", self._poll_forever)):
            thread = self._threads.get(role)
            if thread is None or not thread.is_alive():
                self._threads[role] = threading.Thread(target=target, name=f"throttle-{role}", daemon=True)
                self._threads[role].start()
        self._cond.notify_all()

    def _idle_wait_s(self) -> float | None:
        if not self._idle:
            return None
        oldest = min(slot.idle_since for slot in self._idle.values())
        return max(0.005, oldest + IDLE_S - time.monotonic())

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
