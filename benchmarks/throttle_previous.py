"""The previous throttle client (before the local pool), kept as the benchmark's baseline.

Exactly the issue-13 channel as it was: a sender thread ships every pending acquire and release in one
`submit` call, a poller thread collects every grant in one `poll` call, the process's lease keeper
renews all held leases in one call per TTL/3. Every hold is granted by the actor (a hand-over between
two holds of one process is a release and a grant through the actor).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import threading
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import ray

from retrain_ray.throttle.keeper import RPC_TIMEOUT_S, lease_keeper
from retrain_ray.throttle.types import Lease

log = logging.getLogger(__name__)
POLL_S = 5.0


class PreviousChannel:
    """The previous channel: every grant and release goes through the actor (no local pool)."""

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



_previous: dict[tuple[int, str], PreviousChannel] = {}
_previous_lock = threading.Lock()


def previous_channel(actor_handle) -> PreviousChannel:
    key = (os.getpid(), actor_handle._actor_id.hex())
    with _previous_lock:
        found = _previous.get(key)
        if found is None:
            found = _previous[key] = PreviousChannel(actor_handle)
        return found


class PreviousClient:
    """The previous `ThrottleClient.hold()`: channel acquire, keeper renewal, channel release."""

    def __init__(self, handle, holder: str, timeout_s: float, lease_ttl_s: float) -> None:
        self.handle, self.holder, self.timeout_s, self.lease_ttl_s = handle, holder, timeout_s, lease_ttl_s

    @contextmanager
    def hold(self):
        link = previous_channel(self.handle)
        (lease,) = link.acquire(self.holder, 1, self.timeout_s).result(timeout=self.timeout_s + RPC_TIMEOUT_S)
        keeper = lease_keeper(self.handle)
        keeper.add([lease], self.lease_ttl_s, lambda lost: log.warning("lost %s", lost.lease_id))
        try:
            yield lease
        finally:
            keeper.discard([lease])
            link.release([lease.lease_id]).result(timeout=2 * RPC_TIMEOUT_S)
