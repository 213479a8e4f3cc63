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

import itertools
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["FairQueue"]

T = TypeVar("T")

FORGET_AT = 256  # holders remembered before those at the floor (equivalent to unknown ones) are dropped


class FairQueue(Generic[T]):
    """Waiters (`item`s of `holder`s); `pop()` returns one of the least-served holder waiting."""

    def __init__(self, catch_up: int) -> None:
        if catch_up < 0:
            raise ValueError(f"catch_up must be >= 0, got {catch_up!r}")
        self.catch_up = catch_up
        self._items: list[tuple[int, str, T]] = []  # (arrival, holder, item), in arrival order
        self._served: dict[str, int] = {}
        self._level = 0
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        """The waiting items, in arrival order."""
        return (item for _, _, item in self._items)

    def served(self, holder: str) -> int:
        """The count `holder` is ranked by (its holds, lifted to the floor when it joined)."""
        return self._served.get(holder, 0)

    def push(self, holder: str, item: T) -> None:
        """`item` of `holder` waits; a holder that fell more than `catch_up` behind is lifted."""
        self._served[holder] = self._lifted(holder)
        self._items.append((next(self._arrivals), holder, item))

    def pop(self) -> tuple[str, T]:
        """Remove and return (holder, item) of the least-served waiting holder, earliest arrival first."""
        if not self._items:
            raise IndexError("pop from an empty FairQueue")
        best = min(range(len(self._items)), key=lambda i: (self._served[self._items[i][1]], self._items[i][0]))
        _, holder, item = self._items.pop(best)
        return holder, item

    def charge(self, holder: str) -> None:
        """`holder` was handed a slot (from this queue or an idle one): count it."""
        count = self._lifted(holder)
        self._served[holder] = count + 1
        self._level = max(self._level, count)
        if len(self._served) > FORGET_AT:
            self._forget()

    def remove(self, gone: Callable[[T], bool]) -> list[T]:
        """Take out the items for which `gone(item)` holds; return them."""
        removed = [item for _, _, item in self._items if gone(item)]
        self._items = [entry for entry in self._items if not gone(entry[2])]
        return removed

    def clear(self) -> list[T]:
        """Take out every item; return them in arrival order."""
        items = list(self)
        self._items.clear()
        return items

    def _lifted(self, holder: str) -> int:
        return max(self._served.get(holder, 0), self._level - self.catch_up)

    def _forget(self) -> None:
        floor = self._level - self.catch_up
        waiting = {holder for _, holder, _ in self._items}
        self._served = {h: n for h, n in self._served.items() if n > floor or h in waiting}
