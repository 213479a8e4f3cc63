"""The client's per-process local pool of slots on a real local Ray: capacity across processes, a killed
process's block coming back, no process starving while another reuses its slots, batches still whole.

Holders run in worker processes (Ray actors we create and kill ourselves); a `Gauge` actor counts the
holders inside their hold, so the capacity is checked by who really holds, not by the throttle's own
books. No timing is asserted: every wait is a generous timeout.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid

import ray
from helpers import wait_for

from retrain_ray.actors.throttle import start_throttle
from retrain_ray.throttle import ThrottleClient
from retrain_ray.throttle.channel import channel

TTL_S = 5.0  # a holder process starved of CPU on a loaded machine (load average 30) still renews in time
KILL_TTL_S = 2.0  # the kill test waits for it


def _throttle(capacity: int, ttl_s: float = TTL_S):
    campaign = f"pool-{uuid.uuid4().hex[:8]}"
    return start_throttle(campaign, "tinker", capacity, namespace="throttle-tests", lease_ttl_s=ttl_s)


def _stats(handle):
    return ray.get(handle.stats.remote(), timeout=30)


def _wait_until(predicate, what: str, timeout_s: float = 60.0) -> None:
    wait_for(predicate, timeout_s=timeout_s, what=what, poll_s=0.05)


@ray.remote(num_cpus=0)
class Gauge:
    """Slots held right now, as counted by the holders themselves, and the most ever seen."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.grants: dict[str, int] = {}
        self.stopped = False

    def enter(self, client: str, slots: int = 1) -> None:
        self.now += slots
        self.peak = max(self.peak, self.now)
        self.grants[client] = self.grants.get(client, 0) + 1

    def exit(self, slots: int = 1) -> None:
        self.now -= slots

    def stop(self) -> None:
        self.stopped = True

    def state(self) -> tuple[int, int, dict[str, int], bool]:
        return self.now, self.peak, dict(self.grants), self.stopped


@ray.remote(num_cpus=0, max_concurrency=16)
class Holders:
    """One client process; each concurrent call is one client thread."""

    def __init__(self, handle, gauge) -> None:
        self.handle, self.gauge = handle, gauge

    def pid(self) -> int:
        return os.getpid()

    def hammer(self, client: str, rounds: int) -> int:
        """`rounds` holds, each reported to the gauge; no stop."""
        throttle = ThrottleClient(self.handle, client, timeout_s=120, lease_ttl_s=TTL_S)
        for _ in range(rounds):
            with throttle.hold():
                ray.get(self.gauge.enter.remote(client), timeout=60)
                ray.get(self.gauge.exit.remote(), timeout=60)
        return rounds

    def hammer_until_stopped(self, client: str) -> int:
        """Tiny holds until the gauge says stop (every 10th hold asks); returns the holds made."""
        throttle = ThrottleClient(self.handle, client, timeout_s=120, lease_ttl_s=TTL_S)
        count = 0
        while count % 10 or not ray.get(self.gauge.state.remote(), timeout=60)[3]:
            with throttle.hold():
                if count % 10 == 0:
                    ray.get(self.gauge.enter.remote(client), timeout=60)
                    ray.get(self.gauge.exit.remote(), timeout=60)
            count += 1
        return count

    def hold_many_once(self, client: str, count: int) -> int:
        throttle = ThrottleClient(self.handle, client, timeout_s=120, lease_ttl_s=TTL_S)
        with throttle.hold_many(count) as leases:
            ray.get(self.gauge.enter.remote(client, len(leases)), timeout=60)
            ray.get(self.gauge.exit.remote(len(leases)), timeout=60)
        return len(leases)

    def hold_once_then_release_idle(self, client: str) -> None:
        throttle = ThrottleClient(self.handle, client, timeout_s=120, lease_ttl_s=TTL_S)
        with throttle.hold():
            pass
        throttle.release_idle()  # what a campaign trial does when its run ends

    def hold_forever(self, client: str) -> None:
        with ThrottleClient(self.handle, client, timeout_s=120, lease_ttl_s=TTL_S).hold():
            threading.Event().wait(600)


def _settled(handle):
    _wait_until(lambda: _stats(handle).in_flight == 0, "the pooled slots to go back")
    return _stats(handle)


def test_pooled_holders_in_3_processes_never_exceed_capacity(ray_4cpu_4gpu):
    handle, gauge = _throttle(capacity=3), Gauge.remote()
    procs = [Holders.remote(handle, gauge) for _ in range(3)]
    rounds = 4
    refs = [proc.hammer.remote(f"p{p}-t{t}", rounds) for p, proc in enumerate(procs) for t in range(5)]
    assert sum(ray.get(refs, timeout=300)) == 15 * rounds
    now, peak, grants, _ = ray.get(gauge.state.remote(), timeout=30)
    stats = _settled(handle)
    print(f"holders' own peak {peak}, throttle {stats}")
    assert now == 0 and 1 <= peak <= 3 and sum(grants.values()) == 15 * rounds
    assert stats.peak_in_flight <= 3 and stats.granted == stats.released and stats.expired == 0
    for proc in procs:
        ray.kill(proc)


def test_a_killed_process_block_of_slots_comes_back(ray_4cpu_4gpu):
    handle, gauge = _throttle(capacity=4, ttl_s=KILL_TTL_S), Gauge.remote()
    victim = Holders.remote(handle, gauge)
    pid = ray.get(victim.pid.remote(), timeout=60)
    for i in range(4):
        victim.hold_forever.remote(f"victim-{i}")
    _wait_until(lambda: _stats(handle).in_flight == 4, "the victim to pool all 4 slots")
    survivor = Holders.remote(handle, gauge)
    waiting = [survivor.hammer.remote(f"survivor-{i}", 3) for i in range(4)]
    _wait_until(lambda: _stats(handle).waiting >= 1, "the survivor to queue")
    os.kill(pid, signal.SIGKILL)  # the worker process of an actor this test created
    assert ray.get(waiting, timeout=120) == [3] * 4
    stats = _settled(handle)
    print(f"after the kill: {stats}")
    assert stats.expired == 4 and stats.peak_in_flight == 4
    ray.kill(survivor)


def test_no_process_starves_while_others_reuse_their_slots(ray_4cpu_4gpu):
    """Capacity 2, three processes of 4 tight loops: every client gets grants while all still run."""
    handle, gauge = _throttle(capacity=2), Gauge.remote()
    procs = [Holders.remote(handle, gauge) for _ in range(3)]
    clients = [f"p{p}-t{t}" for p in range(3) for t in range(4)]
    refs = [procs[int(c[1])].hammer_until_stopped.remote(c) for c in clients]

    def everybody_served() -> bool:
        grants = ray.get(gauge.state.remote(), timeout=30)[2]
        return all(grants.get(client, 0) >= 2 for client in clients)

    _wait_until(everybody_served, "every client of every process to be served 20 times", timeout_s=180)
    ray.get(gauge.stop.remote(), timeout=30)
    counts = ray.get(refs, timeout=120)
    _, peak, grants, _ = ray.get(gauge.state.remote(), timeout=30)
    stats = _settled(handle)
    print(f"holds per client {dict(zip(clients, counts, strict=True))}; throttle {stats}")
    assert peak <= 2 and stats.peak_in_flight <= 2 and stats.expired == 0
    for proc in procs:
        ray.kill(proc)


def test_a_batch_gets_all_its_slots_at_once_while_processes_pool_theirs(ray_4cpu_4gpu):
    handle, gauge = _throttle(capacity=3), Gauge.remote()
    pooled = Holders.remote(handle, gauge)
    batcher = Holders.remote(handle, gauge)
    loops = [pooled.hammer_until_stopped.remote(f"single-{i}") for i in range(6)]
    _wait_until(lambda: _stats(handle).in_flight >= 1, "the pooled singles to start")
    assert ray.get([batcher.hold_many_once.remote(f"engine-{i}", 3) for i in range(3)], timeout=120) == [3] * 3
    ray.get(gauge.stop.remote(), timeout=30)
    assert min(ray.get(loops, timeout=120)) >= 1
    _, peak, grants, _ = ray.get(gauge.state.remote(), timeout=30)
    stats = _settled(handle)
    print(f"peak {peak}; grants {grants}; throttle {stats}")
    assert peak <= 3 and stats.peak_in_flight <= 3 and stats.expired == 0
    assert all(grants[f"engine-{i}"] == 1 for i in range(3))
    for proc in (pooled, batcher):
        ray.kill(proc)


def test_release_idle_gives_the_process_idle_slots_back_at_once(ray_4cpu_4gpu):
    """A run that ends gives its idle pooled slot back before its process may exit (not after the TTL)."""
    handle, gauge = _throttle(capacity=2), Gauge.remote()
    proc = Holders.remote(handle, gauge)
    ray.get(proc.hold_once_then_release_idle.remote("run-1"), timeout=120)
    stats = _stats(handle)  # no wait: the slot is back when the call returns
    assert (stats.in_flight, stats.granted, stats.released, stats.expired) == (0, 1, 1, 0)
    ray.kill(proc)


def test_a_freed_slot_goes_to_the_least_served_local_holder(ray_4cpu_4gpu):
    """Capacity 1, clients in this process, driven hand-over by hand-over (each release hands the slot on
    at once, in this thread: no call, no timing). After 4 holds of `a`, a queued `a` and later `b` and `c`
    want the slot: b and c (0 holds) go first. In the closed loop that follows (whoever is served asks
    again), c sits out 3 hand-overs (a thread that did not get the CPU in time) and then catches up, so
    the counts end equal; a FIFO would have served a first and never given c its lost turns back."""
    handle = _throttle(capacity=1)
    link = channel(handle)

    def ask(holder: str):
        return link.acquire(holder, 1, 120.0, TTL_S, lambda lease: None)

    for _ in range(3):
        assert link.release([ask("a").result(timeout=60)]) is None
    lease = ask("a").result(timeout=60)
    waiting = {holder: ask(holder) for holder in "abc"}
    assert not any(future.done() for future in waiting.values())
    order, away = [], 0
    for _ in range(14):
        link.release([lease])
        (holder,) = [h for h, future in waiting.items() if future.done()]
        lease = waiting.pop(holder).result(timeout=0)
        assert lease.holder == holder
        order.append(holder)
        away -= 1
        if away == 0:
            waiting["c"] = ask("c")
        if holder == "c" and order.count("c") == 1:
            away = 3
        else:
            waiting[holder] = ask(holder)
    link.release([lease])
    for future in waiting.values():
        link.release([future.result(timeout=60)])
    counts = {holder: order.count(holder) + 4 * (holder == "a") for holder in "abc"}
    print(f"order {''.join(order)}; holds {counts}")
    assert "".join(order) == "bcbbbcccabcabc"
    assert counts == {"a": 6, "b": 6, "c": 6}
    assert _settled(handle).peak_in_flight == 1
