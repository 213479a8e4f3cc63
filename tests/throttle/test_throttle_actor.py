"""ThrottleActor and its clients on a real local Ray: capacity, crash reclaim, FIFO, timeout, resize.

Clients run in separate worker processes (Ray actors we create and kill ourselves). TTLs are 1 s.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid

import pytest
import ray
from helpers import wait_for

from retrain_ray.actors.throttle import get_throttle, start_throttle
from retrain_ray.throttle import NoThrottle, Throttle, ThrottleClient, ThrottleTimeout
from retrain_ray.throttle.client import lease_keeper

TTL_S = 1.0


def _throttle(capacity: int, ttl_s: float = TTL_S):
    campaign = f"test-{uuid.uuid4().hex[:8]}"
    return start_throttle(campaign, "tinker", capacity, namespace="throttle-tests", lease_ttl_s=ttl_s)


def _stats(handle):
    return ray.get(handle.stats.remote(), timeout=30)


def _settled(handle):
    """Stats once every slot is back: a process keeps an idle slot up to IDLE_S for its next hold."""
    wait_for(lambda: _stats(handle).in_flight == 0, timeout_s=30, what="the idle pooled slots to go back",
             poll_s=0.05)
    return _stats(handle)


@ray.remote(num_cpus=0, max_concurrency=16)
class ThreadedHolders:
    """A worker process whose concurrent calls (threads) hold slots with the sync client."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def pid(self) -> int:
        return os.getpid()

    def hammer(self, holder: str, rounds: int, hold_s: float) -> int:
        client = ThrottleClient(self.handle, holder, timeout_s=120, lease_ttl_s=TTL_S)
        for _ in range(rounds):
            with client.hold():
                time.sleep(hold_s)
        return rounds

    def hold_for(self, holder: str, hold_s: float) -> int:
        client = ThrottleClient(self.handle, holder, timeout_s=120, lease_ttl_s=TTL_S)
        with client.hold():
            time.sleep(hold_s)
        return client.lost_leases

    def hold_many_for(self, holder: str, count: int, hold_s: float) -> tuple[int, int]:
        """Hold `count` slots in one call; return (leases granted, threads alive while held)."""
        client = ThrottleClient(self.handle, holder, timeout_s=120, lease_ttl_s=TTL_S)
        with client.hold_many(count) as leases:
            time.sleep(hold_s)
            threads = threading.active_count()
        return len(leases), threads

    def keeper_state(self) -> tuple[int, int, int]:
        """(renew_many calls so far, leases kept, keeper threads alive) of this process."""
        keeper = lease_keeper(self.handle)
        alive = sum(t.name == "throttle-lease-keeper" for t in threading.enumerate())
        return keeper.renew_calls, keeper.held, alive


@ray.remote(num_cpus=0, max_concurrency=16)
class AsyncHolders:
    """A worker process whose concurrent coroutines hold slots with the async client."""

    def __init__(self, handle) -> None:
        self.handle = handle

    async def hammer(self, holder: str, rounds: int, hold_s: float) -> int:
        client = ThrottleClient(self.handle, holder, timeout_s=120, lease_ttl_s=TTL_S)
        for _ in range(rounds):
            async with client.hold_async():
                await asyncio.sleep(hold_s)
        return rounds


def test_32_clients_in_4_processes_never_exceed_capacity(ray_4cpu_4gpu):
    handle = _throttle(capacity=3)
    procs = [ThreadedHolders.remote(handle), ThreadedHolders.remote(handle)]
    procs += [AsyncHolders.remote(handle), AsyncHolders.remote(handle)]
    rounds = 4
    refs = [
        proc.hammer.remote(f"run-{p}-{i}", rounds, 0.02) for p, proc in enumerate(procs) for i in range(8)
    ]
    assert sum(ray.get(refs, timeout=240)) == 32 * rounds
    stats = _settled(handle)
    print(stats)
    assert stats.peak_in_flight == 3  # saturated, and never above capacity
    # hand-overs inside a process cost the actor no grant; every slot it granted came back
    assert 3 <= stats.granted <= 128 and stats.released == stats.granted
    assert (stats.expired, stats.in_flight, stats.waiting) == (0, 0, 0)
    assert stats.wait_p99_s > 0.0
    for proc in procs:
        ray.kill(proc)


def test_killed_holder_loses_its_lease_within_ttl_and_a_waiter_proceeds(ray_4cpu_4gpu):
    handle = _throttle(capacity=1)
    victim = ThreadedHolders.remote(handle)
    victim_ref = victim.hold_for.remote("victim", 600.0)
    wait_for(lambda: _stats(handle).in_flight == 1, timeout_s=30, what="the victim's lease", poll_s=0.05)
    waiter_ref = handle.acquire.remote("waiter", 60.0)
    wait_for(lambda: _stats(handle).waiting == 1, timeout_s=30, what="the waiter to queue", poll_s=0.05)
    killed_at = time.monotonic()  # same machine: the actor's monotonic clock is this one
    ray.kill(victim)
    lease = ray.get(waiter_ref, timeout=60)
    latency_s = lease.granted_at - killed_at
    print(f"reclaim latency {latency_s:.2f} s (TTL {TTL_S} s, reaper period {TTL_S / 4} s)")
    stats = _stats(handle)
    assert lease.holder == "waiter" and stats.expired == 1 and stats.in_flight == 1
    assert latency_s <= TTL_S + TTL_S / 4 + 2.0  # TTL + one reaper period, plus slack for a loaded box
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(victim_ref, timeout=30)


def test_renewal_keeps_a_lease_alive_past_its_ttl(ray_4cpu_4gpu):
    handle = _throttle(capacity=1)
    proc = ThreadedHolders.remote(handle)
    assert ray.get(proc.hold_for.remote("long-call", 2.5 * TTL_S), timeout=60) == 0
    stats = _settled(handle)
    assert (stats.expired, stats.released) == (0, 1)
    ray.kill(proc)


def test_one_process_renews_all_its_leases_in_one_call_per_period(ray_4cpu_4gpu):
    """8 concurrent holds in one process past 2.5 TTLs: one keeper thread, one renewal call per period."""
    handle = _throttle(capacity=8)
    proc = ThreadedHolders.remote(handle)
    hold_s = 2.5 * TTL_S
    lost = ray.get([proc.hold_for.remote(f"run-{i}", hold_s) for i in range(8)], timeout=120)
    stats = _settled(handle)
    wait_for(lambda: ray.get(proc.keeper_state.remote(), timeout=30)[2] == 0, timeout_s=30,
             what="the idle keeper to exit", poll_s=0.05)
    calls, kept, _ = ray.get(proc.keeper_state.remote(), timeout=30)
    assert lost == [0] * 8 and (stats.expired, stats.released, stats.in_flight) == (0, 8, 0)
    periods = (hold_s + 0.5) / (TTL_S / 3)  # one renew_many per TTL/3 covers all 8 holds (+ idle linger)
    assert 1 <= calls <= periods + 2, f"{calls} renewal calls for 8 holds over {periods:.1f} periods"
    assert kept == 0
    ray.kill(proc)


def test_hold_many_takes_slots_in_one_call_all_or_nothing_fifo(ray_4cpu_4gpu):
    handle = _throttle(capacity=4)
    first = ray.get(handle.acquire.remote("first", 10.0), timeout=30)
    batch = handle.acquire_many.remote("engine", 4, 60.0)  # needs all 4: waits for `first`
    wait_for(lambda: _stats(handle).waiting == 1, timeout_s=30, what="the batch to queue", poll_s=0.05)
    late = handle.acquire.remote("late", 60.0)  # a free slot exists, but the batch came first
    wait_for(lambda: _stats(handle).waiting == 2, timeout_s=30, what="the single request to queue", poll_s=0.05)
    assert _stats(handle).in_flight == 1
    ray.get(handle.release.remote(first.lease_id), timeout=30)
    leases = ray.get(batch, timeout=30)
    assert [lease.holder for lease in leases] == ["engine"] * 4 and len({x.lease_id for x in leases}) == 4
    assert ray.wait([late], timeout=0.3)[0] == []  # capacity 4 is taken by the batch
    assert ray.get(handle.release_many.remote([x.lease_id for x in leases]), timeout=30) == []
    late_lease = ray.get(late, timeout=30)
    assert late_lease.holder == "late"
    ray.get(handle.release.remote(late_lease.lease_id), timeout=30)
    with pytest.raises(ValueError, match="max_concurrent"):
        ray.get(handle.acquire_many.remote("too-big", 5, 1.0), timeout=30)
    proc = ThreadedHolders.remote(handle)
    granted, _ = ray.get(proc.hold_many_for.remote("engine-2", 3, 2 * TTL_S), timeout=60)
    stats = _stats(handle)
    assert granted == 3 and (stats.expired, stats.in_flight, stats.granted, stats.released) == (0, 0, 9, 9)
    ray.kill(proc)


def test_a_session_batches_requests_and_a_silent_session_loses_its_slots(ray_4cpu_4gpu):
    """submit/poll carry many requests per call; a session that stops polling is dropped after the TTL."""
    handle = _throttle(capacity=2)
    requests = [(0, "a", 1, 60.0), (1, "b", 1, 60.0), (2, "c", 1, 60.0), (3, "d", 5, 60.0)]
    assert ray.get(handle.submit.remote("proc-1", [], requests), timeout=30) == []
    outcomes = dict(ray.get(handle.poll.remote("proc-1", 5.0), timeout=30))
    assert sorted(outcomes) == [0, 1, 3] and isinstance(outcomes[3], ValueError)  # 5 > capacity 2
    assert [lease.holder for lease in outcomes[0] + outcomes[1]] == ["a", "b"]
    unknown = ray.get(handle.submit.remote("proc-1", [outcomes[0][0].lease_id, "nope"], []), timeout=30)
    assert unknown == ["nope"]
    ((request_id, leases),) = ray.get(handle.poll.remote("proc-1", 5.0), timeout=30)
    assert request_id == 2 and leases[0].holder == "c"
    ray.get(handle.submit.remote("proc-1", [], [(4, "e", 1, 60.0)]), timeout=30)  # queued, never polled
    # proc-1 goes silent holding b and c with e queued: leases expire, the session is dropped.
    waiter = handle.acquire_many.remote("survivor", 2, 60.0)
    assert [lease.holder for lease in ray.get(waiter, timeout=30)] == ["survivor"] * 2
    assert _stats(handle).waiting == 0


def test_a_silent_session_loses_the_leases_granted_to_its_queue_with_its_first_expiry(ray_4cpu_4gpu):
    """Issue 15: a dead process's queued request granted after it died is taken back with its older lease,
    at the first expiry, not a TTL after that late grant."""
    ttl_s = 3.0  # room on a loaded machine: the release lands well before the first expiry, and the reaper
    # (every ttl_s / 4) well before the late grant's expiry
    handle = _throttle(capacity=2, ttl_s=ttl_s)
    (other,) = ray.get(handle.acquire_many.remote("other", 1, 60.0), timeout=30)
    ray.get(handle.submit.remote("dead", [], [(0, "d0", 1, 60.0)]), timeout=30)
    ((_, (first,)),) = ray.get(handle.poll.remote("dead", 5.0), timeout=30)
    ray.get(handle.submit.remote("dead", [], [(1, "d1", 1, 60.0)]), timeout=30)  # queued: capacity is full
    time.sleep(ttl_s / 2)
    ray.get(handle.release.remote(other.lease_id), timeout=30)  # the dead process's queued request gets it
    late = wait_for(lambda: [x for x in ray.get(handle.leases.remote(), timeout=30) if x.holder == "d1"],
                    timeout_s=30, what="the grant to the queued request", poll_s=0.02)[0]
    assert late.expires_at > first.expires_at  # granted later: without the fix it would outlive the first
    reclaims = wait_for(lambda: [r for r in ray.get(handle.reclaims.remote(), timeout=30)
                                 if r.lease.lease_id == late.lease_id], timeout_s=30, what="the late grant's reclaim")
    (first_reclaim,) = [r for r in ray.get(handle.reclaims.remote(), timeout=30) if r.lease.lease_id == first.lease_id]
    assert reclaims[0].reclaimed_at == first_reclaim.reclaimed_at  # the same reaper tick
    assert reclaims[0].reclaimed_at < late.expires_at
    survivor = ray.get(handle.acquire_many.remote("survivor", 2, 60.0), timeout=30)
    assert [lease.holder for lease in survivor] == ["survivor"] * 2


def test_waiters_are_served_in_arrival_order(ray_4cpu_4gpu):
    handle = _throttle(capacity=1)
    current = ray.get(handle.acquire.remote("first", 10.0), timeout=30)
    refs = {}
    for i in range(5):
        refs[f"w{i}"] = handle.acquire.remote(f"w{i}", 60.0)
        wait_for(lambda i=i: _stats(handle).waiting == i + 1, timeout_s=30, what=f"waiter w{i} to queue", poll_s=0.05)
    order = []
    pending = list(refs.values())
    while pending:
        ray.get(handle.release.remote(current.lease_id), timeout=30)
        ready, pending = ray.wait(pending, num_returns=1, timeout=30)
        current = ray.get(ready[0])
        order.append(current.holder)
    assert order == ["w0", "w1", "w2", "w3", "w4"]


def test_timeout_raises_the_documented_error_and_leaves_no_ghost_waiter(ray_4cpu_4gpu):
    handle = _throttle(capacity=1)
    held = ray.get(handle.acquire.remote("holder", 10.0), timeout=30)
    with pytest.raises(ThrottleTimeout) as info:
        with ThrottleClient(handle, "late", timeout_s=0.3).hold():
            pass
    err = info.value
    assert (err.endpoint, err.capacity) == ("tinker", 1) and err.waited_s > 0
    assert "max_concurrent" in str(err) and "acquire_timeout_s" in str(err)
    assert _stats(handle).waiting == 0
    ray.get(handle.release.remote(held.lease_id), timeout=30)
    lease = ray.get(handle.acquire.remote("next", 5.0), timeout=30)
    assert lease.holder == "next"


def test_resize_up_and_down_with_queued_waiters(ray_4cpu_4gpu):
    handle = _throttle(capacity=2)
    held = [ray.get(handle.acquire.remote(f"h{i}", 10.0), timeout=30) for i in range(2)]
    pending = [handle.acquire.remote(f"w{i}", 60.0) for i in range(6)]
    wait_for(lambda: _stats(handle).waiting == 6, timeout_s=30, what="6 queued waiters", poll_s=0.05)
    ray.get(handle.resize.remote(4), timeout=30)
    ready, pending = ray.wait(pending, num_returns=2, timeout=30)
    held += ray.get(ready)
    assert _stats(handle).in_flight == 4 and _stats(handle).waiting == 4
    ray.get(handle.resize.remote(1), timeout=30)  # shrink: nobody is revoked
    assert _stats(handle).in_flight == 4
    for lease in held[:3]:
        ray.get(handle.release.remote(lease.lease_id), timeout=30)
    stats = _stats(handle)
    assert (stats.capacity, stats.in_flight, stats.waiting) == (1, 1, 4)  # 1 holder = capacity: no grant
    ray.get(handle.release.remote(held[3].lease_id), timeout=30)
    ready, pending = ray.wait(pending, num_returns=1, timeout=30)
    assert len(ready) == 1 and _stats(handle).in_flight == 1 and _stats(handle).peak_in_flight == 4
    with pytest.raises(ValueError, match="max_concurrent"):
        ray.get(handle.resize.remote(0), timeout=30)


def test_sync_hold_releases_on_exception(ray_4cpu_4gpu):
    handle = _throttle(capacity=1)
    client = ThrottleClient(handle, "run-sync", timeout_s=10, lease_ttl_s=TTL_S)
    assert isinstance(client, Throttle)
    with pytest.raises(RuntimeError, match="endpoint failed"):
        with client.hold() as lease:
            assert lease.holder == "run-sync" and _stats(handle).in_flight == 1
            raise RuntimeError("endpoint failed")
    stats = _settled(handle)
    assert (stats.in_flight, stats.released, stats.expired) == (0, 1, 0)


def test_async_hold_releases_on_exception(ray_4cpu_4gpu):
    handle = _throttle(capacity=1)
    client = ThrottleClient(handle, "run-async", timeout_s=10, lease_ttl_s=TTL_S)

    async def body() -> None:
        async with client.hold_async() as lease:
            assert lease.holder == "run-async"
            raise RuntimeError("endpoint failed")

    with pytest.raises(RuntimeError, match="endpoint failed"):
        asyncio.run(body())
    stats = _settled(handle)
    assert (stats.in_flight, stats.released, stats.expired) == (0, 1, 0)


def test_named_actor_is_found_and_reused(ray_4cpu_4gpu):
    campaign = f"test-{uuid.uuid4().hex[:8]}"
    first = start_throttle(campaign, "judge", 2, namespace="throttle-tests", lease_ttl_s=TTL_S)
    again = start_throttle(campaign, "judge", 7, namespace="throttle-tests", lease_ttl_s=TTL_S)
    found = get_throttle(campaign, "judge", "throttle-tests")
    assert first._actor_id == again._actor_id == found._actor_id
    assert _stats(found).capacity == 2  # an existing actor is returned unchanged
    with pytest.raises(LookupError, match="start_throttle"):
        get_throttle(campaign, "other-endpoint", "throttle-tests")


def test_no_throttle_has_the_same_interface():
    throttle = NoThrottle()
    assert isinstance(throttle, Throttle)
    with throttle.hold() as lease:
        assert lease is None

    async def body():
        async with throttle.hold_async() as lease:
            return lease

    assert asyncio.run(body()) is None
