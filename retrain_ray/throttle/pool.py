"""The local pool of slots of a process's throttle `Channel`: the bookkeeping, all under the channel's lock.

Single-slot holds are served from a local pool. The channel asks the actor for one slot per local
waiter (all asks of a moment in one `exchange` call), and a released slot goes straight to a local
waiter without a call (the least-served holder first, `fairqueue`), or stays idle for the next local
hold, as long as the process holds no more than the actor's `PoolState.keep`: the whole capacity
while nobody else waits, an equal share per active process while others wait, nothing while a batch
heads the actor's queue or after a shrink. Slots above that go back to the actor, whose FIFO queue
serves everybody's asks, so no process hoards slots while others queue. An idle slot goes back when
others wait or after `IDLE_S`.

`LocalPool` holds the pool and the outbox of calls to send (requests, releases, withdrawn asks); its
subclass `Channel` sends them (`_kick` wakes its sender) and feeds the actor's replies back in.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from retrain_ray.throttle.keeper import LeaseKeeper
from retrain_ray.throttle.types import Lease, PoolState

__all__ = ["BLOCK_USES", "CATCH_UP", "IDLE_S", "QUANTUM_S", "Future", "LocalPool", "OnLost", "Slot", "Waiter"]

log = logging.getLogger(__name__)

IDLE_S = 0.2  # an idle slot nobody else waits for is kept this long for the next local hold
BLOCK_USES = 32  # while others wait, a slot serves at most this many local holds per grant ...
QUANTUM_S = 0.05  # ... and is passed on locally only this long after its grant, then goes back
CATCH_UP = BLOCK_USES  # holds a holder that fell behind may take ahead of the others (see fairqueue)

OnLost = Callable[[Lease], None]
Future = concurrent.futures.Future


@dataclass
class Waiter:
    future: Future
    holder: str
    on_lost: OnLost


@dataclass
class Slot:
    """A slot of the local pool: its lease, when the actor granted it here, local holds served since."""

    lease: Lease
    got_at: float
    uses: int = 0
    on_lost: OnLost | None = None  # of the client holding it now
    idle_since: float = 0.0


class LocalPool:
    """The slots this process holds of one throttle actor, its local waiters, and what to send."""

    def __init__(self, keeper: LeaseKeeper) -> None:
        self._keeper = keeper
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._requests: list[tuple[int, str, int, float]] = []  # to send: (id, holder, count, timeout)
        self._releases: list[tuple[list[str], Future | None]] = []  # to send, with who waits for the ack
        self._cancels: list[int] = []  # asks to withdraw
        self._batches: dict[int, tuple[Future, OnLost]] = {}
        self._batch_leases: set[str] = set()
        self._asks: set[int] = set()  # single-slot requests the actor has not answered yet
        self._ask_timeout_s = 600.0
        self._waiters: FairQueue[Waiter] = FairQueue(CATCH_UP)  # local single-slot holds, least-served first
        self._idle: dict[str, Slot] = {}  # by lease id
        self._in_use: dict[str, Slot] = {}
        self._state: PoolState | None = None
        self._ttl_s = math.inf  # smallest lease_ttl_s of this process's clients
        self.local_grants = 0

    def _kick(self) -> None:
        """Something was added to send: wake the sender (the subclass's)."""
        raise NotImplementedError

    def _acquire_one(self, waiter: Waiter, timeout_s: float) -> None:
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

    def _hand(self, slot: Slot, waiter: Waiter) -> bool:
        if not waiter.future.set_running_or_notify_cancel():
            return False  # an async caller gave up
        slot.uses += 1
        self._waiters.charge(waiter.holder)
        slot.on_lost = waiter.on_lost
        self._in_use[slot.lease.lease_id] = slot
        self.local_grants += 1
        waiter.future.set_result(replace(slot.lease, holder=waiter.holder))
        return True

    def _may_reuse(self, slot: Slot) -> bool:
        """May a released slot serve another local hold? Not above `keep`; while others wait, only
        within its block (BLOCK_USES holds, QUANTUM_S), so slots rotate through the actor's FIFO."""
        state = self._state
        if state is None or self._owned() + 1 > state.keep:
            return False
        spent = slot.uses >= BLOCK_USES or time.monotonic() - slot.got_at >= QUANTUM_S
        return not (state.others_waiting and spent)

    def _place(self, slot: Slot) -> None:
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
                self._kick()  # the sender may sleep until something is to send
            self._state = state
            self._settle()

    def _resolve(self, request_id: int, outcome: list[Lease] | BaseException) -> None:
        if request_id in self._asks:
            self._asks.discard(request_id)
            if isinstance(outcome, BaseException):  # expired or dropped: ask again if still needed
                self._ask()
                return
            self._keeper.add(outcome, self._ttl_s, self._lost)
            self._place(Slot(outcome[0], time.monotonic()))
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

    def _idle_wait_s(self) -> float | None:
        if not self._idle:
            return None
        oldest = min(slot.idle_since for slot in self._idle.values())
        return max(0.005, oldest + IDLE_S - time.monotonic())


# The queue of a process's local holds waiting for a slot: least-served holder first, not arrival order.
#
# A plain FIFO of waiters is fair only if every holder is always in it. Threads of one process are not:
# a thread handed a slot must still win the interpreter (GIL) and the CPU before it can release and ask
# again, so under contention some holders sit out rounds they would have waited in, and FIFO never pays
# them back (grants per client spread 1.1-1.2x inside one process in `benchmarks/throttle.py`).
#
# Here every holder (a run id: all its threads and coroutines count as one) has a count of the holds
# this process handed it, and a free slot goes to the waiting holder with the smallest count, ties in
# arrival order. A holder that fell behind therefore catches up as soon as it waits again. The catch-up
# is bounded, as in start-time fair queuing: a holder that (re)joins is lifted to at least `level -
# catch_up`, `level` being the highest count at which a holder was served (the service level reached),
# so a run that was idle for a long time gets at most `catch_up` holds of priority, not a burst that
# starves the others. Hence a waiter is overtaken at most `catch_up + 2` times by each other holder.
#
# Plain Python, no threads: the `Channel` calls it under its lock.
__all__ = ["FairQueue"]

T = TypeVar("T")

FORGET_AT = 256  # holders remembered before those at the floor (equivalent to unknown ones) are dropped


class FairQueue(Generic[T]):
    """Waiters (`item`s of `holder`s); `pop()` returns one of the least-served holder waiting.

    A pop costs O(holders waiting), not O(items): one FIFO per holder, and the rank of a holder is its
    count and the arrival of its oldest item.
    """

    def __init__(self, catch_up: int) -> None:
        if catch_up < 0:
            raise ValueError(f"catch_up must be >= 0, got {catch_up!r}")
        self.catch_up = catch_up
        self._queues: dict[str, deque[tuple[int, T]]] = {}  # holder -> its (arrival, item)s, oldest first
        self._len = 0
        self._served: dict[str, int] = {}
        self._level = 0
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[T]:
        """The waiting items, in arrival order."""
        return (item for _, item in heapq.merge(*self._queues.values(), key=lambda entry: entry[0]))

    def served(self, holder: str) -> int:
        """The count `holder` is ranked by (its holds, lifted to the floor when it joined)."""
        return self._served.get(holder, 0)

    def push(self, holder: str, item: T) -> None:
        """`item` of `holder` waits; a holder that fell more than `catch_up` behind is lifted."""
        self._served[holder] = self._lifted(holder)
        self._queues.setdefault(holder, deque()).append((next(self._arrivals), item))
        self._len += 1

    def pop(self) -> tuple[str, T]:
        """Remove and return (holder, item) of the least-served waiting holder, earliest arrival first."""
        if not self._queues:
            raise IndexError("pop from an empty FairQueue")
        if len(self._queues) == 1:
            holder = next(iter(self._queues))
        else:
            holder = min(self._queues, key=lambda h: (self._served[h], self._queues[h][0][0]))
        queue = self._queues[holder]
        _, item = queue.popleft()
        if not queue:
            del self._queues[holder]
        self._len -= 1
        return holder, item

    def charge(self, holder: str) -> None:
        """`holder` was handed a slot (from this queue or an idle one): count it."""
        count = self._lifted(holder)
        self._served[holder] = count + 1
        self._level = max(self._level, count)
        if len(self._served) > FORGET_AT:
            self._forget()

    def remove(self, gone: Callable[[T], bool]) -> list[T]:
        """Take out the items for which `gone(item)` holds; return them (in arrival order)."""
        removed = [item for item in self if gone(item)]
        if removed:
            for holder, queue in list(self._queues.items()):
                kept = deque(entry for entry in queue if not gone(entry[1]))
                if kept:
                    self._queues[holder] = kept
                else:
                    del self._queues[holder]
            self._len -= len(removed)
        return removed

    def clear(self) -> list[T]:
        """Take out every item; return them in arrival order."""
        items = list(self)
        self._queues.clear()
        self._len = 0
        return items

    def _lifted(self, holder: str) -> int:
        return max(self._served.get(holder, 0), self._level - self.catch_up)

    def _forget(self) -> None:
        floor = self._level - self.catch_up
        self._served = {h: n for h, n in self._served.items() if n > floor or h in self._queues}
