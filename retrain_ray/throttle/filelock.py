"""`[backend] throttle_dir`: a counting semaphore of file locks shared by runs launched by hand (spec 6).

The directory holds `slot_0.lock` .. `slot_{N-1}.lock` (N = `[backend] max_concurrent`); a holder keeps an
exclusive `flock` on one of them for the call, so runs of any process on the machine (or sharing the
directory on a file system with working flock) share N slots. A lock dies with its file descriptor or
process, so a crashed run frees its slot without stale-lock handling.

Two fixes over the original's `TinkerThrottle`: its waiters all blocked on `slot_0.lock` while other slots
could sit free; here a waiter tries every slot (starting at a random one, so waiters do not all race for
the same slot) and polls again after a short pause, so any freed slot is taken. And every wait has a
timeout (`[backend] acquire_timeout_s`), ending in `FileThrottleTimeout` naming the directory and the fix.
The order among waiters is not first-come-first-served (flock offers none); in a campaign, the throttle
actor is (and replaces this directory for the runs it guards).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from retrain_ray.throttle.types import ThrottleTimeout

POLL_S = 0.02  # the first pause between rounds over the slots; it doubles up to MAX_POLL_S
MAX_POLL_S = 0.25


class FileThrottleTimeout(ThrottleTimeout):
    """No slot of the lock directory came free within the timeout."""

    def __init__(self, endpoint: str, capacity: int, waited_s: float) -> None:
        super().__init__(endpoint, capacity, waited_s)
        self.args = (f"[backend] throttle_dir {endpoint!r}: none of its {capacity} slots came free in {waited_s:.1f} s "
                     "(other runs held them all); fix: raise [backend] max_concurrent (more runs at once; every run "
                     "sharing the directory should agree on it) or [backend] acquire_timeout_s (wait longer), or "
                     "run fewer runs at once",)

    def __str__(self) -> str:
        return str(self.args[0])


class FileLockThrottle:
    """The `Throttle` protocol over `slot_{i}.lock` files; each hold opens its own descriptor, so threads of
    one process count separately, as processes do."""

    def __init__(self, lock_dir: str | Path, capacity: int, *, timeout_s: float) -> None:
        if capacity < 1 or timeout_s <= 0:
            raise ValueError(f"a file throttle needs capacity >= 1 and timeout_s > 0 (got {capacity}, {timeout_s})")
        self.lock_dir = Path(lock_dir).expanduser()
        self.capacity = capacity
        self.timeout_s = timeout_s
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        self.paths = [self.lock_dir / f"slot_{i}.lock" for i in range(capacity)]
        for path in self.paths:
            path.touch(exist_ok=True)

    def _try_once(self) -> int | None:
        """A descriptor holding a free slot's lock, or None when every slot is held."""
        start = random.randrange(self.capacity)
        for k in range(self.capacity):
            fd = os.open(self.paths[(start + k) % self.capacity], os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        return None

    def _acquire(self, count: int) -> list[int]:
        if count > self.capacity:
            raise ValueError(f"a throttle request for {count} slots exceeds [backend] max_concurrent = {self.capacity}")
        started = time.monotonic()
        held: list[int] = []
        pause = POLL_S
        try:
            while len(held) < count:
                fd = self._try_once()
                if fd is not None:
                    held.append(fd)
                    continue
                waited = time.monotonic() - started
                if waited >= self.timeout_s:
                    raise FileThrottleTimeout(str(self.lock_dir), self.capacity, waited)
                time.sleep(min(pause, self.timeout_s - waited))
                pause = min(pause * 2, MAX_POLL_S)
        except BaseException:
            _release(held)
            raise
        return held

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """One slot for the body, released on exit (exceptions included)."""
        with self.hold_many(1):
            yield None

    @contextlib.contextmanager
    def hold_many(self, count: int) -> Iterator[list[None]]:
        """`count` slots for the body (all or nothing), released together on exit."""
        held = self._acquire(count)
        try:
            yield [None] * count
        finally:
            _release(held)

    @contextlib.asynccontextmanager
    async def hold_async(self) -> AsyncIterator[None]:
        async with self.hold_many_async(1):
            yield None

    @contextlib.asynccontextmanager
    async def hold_many_async(self, count: int) -> AsyncIterator[list[None]]:
        """`hold_many` for asyncio code: the wait runs in a thread, never blocking the event loop."""
        held = await asyncio.to_thread(self._acquire, count)
        try:
            yield [None] * count
        finally:
            _release(held)


def _release(held: list[int]) -> None:
    for fd in held:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
