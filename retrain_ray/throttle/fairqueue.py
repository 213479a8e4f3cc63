"""The queue of a process's local holds waiting for a slot: least-served holder first, not arrival order.

A plain FIFO of waiters is fair only if every holder is always in it. Threads of one process are not:
a thread handed a slot must still win the interpreter (GIL) and the CPU before it can release and ask
again, so under contention some holders sit out rounds they would have waited in, and FIFO never pays
them back (grants per client spread 1.1-1.2x inside one process in `benchmarks/throttle.py`).

Here every holder (a run id: all its threads and coroutines count as one) has a count of the holds
this process handed it, and a free slot goes to the waiting holder with the smallest count, ties in
arrival order. A holder that fell behind therefore catches up as soon as it waits again. The catch-up
is bounded, as in start-time fair queuing: a holder that (re)joins is lifted to at least `level -
catch_up`, `level` being the highest count at which a holder was served (the service level reached),
so a run that was idle for a long time gets at most `catch_up` holds of priority, not a burst that
starves the others. Hence a waiter is overtaken at most `catch_up + 2` times by each other holder.

Plain Python, no threads: the `Channel` calls it under its lock.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

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
