"""A throttle actor killed while 2 holders hold and 2 wait: Ray restarts it, the holders keep their slots,
never more than the capacity hold at once (counted from the holders' side), the waiters are served, the
restart is in `control_restarts.jsonl`. Real Ray, real actors, the throttle's process SIGKILLed by pid.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import ray
from helpers import wait_for

from retrain_ray.actors.restarts import read_restarts
from retrain_ray.actors.throttle import start_throttle
from retrain_ray.throttle import ThrottleClient

TTL_S = 2.0
CAPACITY = 2
HOLD_S = 8.0  # long enough to span the kill, the restart and the grace period


@ray.remote(num_cpus=0)
class Tally:
    """Counts the holders inside their hold, from their side: now and the most ever at once."""

    def __init__(self) -> None:
        self.now = self.peak = 0

    def enter(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        self.now -= 1

    def counts(self) -> tuple[int, int]:
        return self.now, self.peak


@ray.remote(num_cpus=0)
class Holder:
    """One client process holding one slot for `hold_s`; returns its lost leases and when it got in."""

    def __init__(self, handle, tally) -> None:
        self.handle, self.tally = handle, tally

    def hold(self, holder: str, hold_s: float) -> tuple[int, float]:
        client = ThrottleClient(self.handle, holder, timeout_s=120, lease_ttl_s=TTL_S)
        with client.hold():
            entered = time.time()
            ray.get(self.tally.enter.remote(), timeout=30)
            time.sleep(hold_s)
            ray.get(self.tally.leave.remote(), timeout=30)
        return client.lost_leases, entered


def _stats(handle):
    return ray.get(handle.stats.remote(), timeout=60)


@pytest.mark.extended  # about 50 s: a throttle actor killed and restarted, holders renewing through its grace period
def test_killed_throttle_restarts_keeps_holders_and_serves_waiters(ray_4cpu_4gpu, tmp_path):
    campaign = f"restart-{uuid.uuid4().hex[:8]}"
    handle = start_throttle(campaign, "tinker", CAPACITY, namespace="throttle-tests", lease_ttl_s=TTL_S,
                            campaign_dir=tmp_path)
    tally = Tally.remote()
    procs = [Holder.remote(handle, tally) for _ in range(4)]
    held = [proc.hold.remote(f"holder-{i}", HOLD_S) for i, proc in enumerate(procs[:2])]
    wait_for(lambda: ray.get(tally.counts.remote(), timeout=30)[0] == CAPACITY, timeout_s=60,
             what="2 holders inside their hold")
    waited = [proc.hold.remote(f"waiter-{i}", 1.0) for i, proc in enumerate(procs[2:])]
    wait_for(lambda: _stats(handle).waiting == 2, timeout_s=60, what="2 waiters queued", poll_s=0.1)
    old_pid = ray.get(handle.pid.remote(), timeout=30)

    killed_at = time.time()
    os.kill(old_pid, signal.SIGKILL)

    holder_results = ray.get(held, timeout=120)
    waiter_results = ray.get(waited, timeout=120)
    new_pid = ray.get(handle.pid.remote(), timeout=60)
    now, peak = ray.get(tally.counts.remote(), timeout=30)
    adopted = ray.get(handle.adopted.remote(), timeout=30)
    holders_done = max(entered for _, entered in holder_results) + HOLD_S
    first_waiter_in = min(entered for _, entered in waiter_results)
    print(f"throttle pid {old_pid} -> {new_pid}; re-adopted {adopted} leases; peak held {peak}; "
          f"waiters in {first_waiter_in - killed_at:.1f} s after the kill")
    assert new_pid != old_pid
    assert [lost for lost, _ in holder_results] == [0, 0]  # the holders kept their slots
    assert [lost for lost, _ in waiter_results] == [0, 0]
    assert adopted == 2
    assert now == 0 and peak <= CAPACITY  # never more than the capacity at once, from the holders' side
    assert first_waiter_in >= holders_done - 1.0  # a waiter got in only as a holder left (FIFO, no overlap)
    restarts = read_restarts(tmp_path)
    assert [r["actor"] for r in restarts] == ["throttle tinker"] and restarts[0]["pid"] == new_pid
    for proc in procs:
        ray.kill(proc)
    ray.kill(tally)
