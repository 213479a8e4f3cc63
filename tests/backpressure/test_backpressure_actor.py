"""Back-pressure actor on real Ray: Arrow log, RemoteAdvisor, throttle push, and a closed loop on a
simulated shared endpoint with a known optimum."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray
from helpers import wait_for

from retrain_ray.actors.backpressure import RemoteAdvisor, start_backpressure_actor
from retrain_ray.actors.simulated_endpoint import RecordingAdvisor, SimulatedEndpoint, simulated_run
from retrain_ray.actors.throttle import start_throttle
from retrain_ray.backpressure.arrow_log import read_decision_log
from retrain_ray.backpressure.settings import BackPressureSettings
from retrain_ray.backpressure.types import StepObservation
from retrain_ray.backpressure.usl import usl_capacity, usl_optimal_p
from retrain_ray.throttle.client import ThrottleClient

NS = "retrain-ray-tests"


@ray.remote(num_cpus=0)
class _ResizeRecorder:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def resize(self, capacity: int) -> None:
        self.sizes.append(capacity)

    def get(self) -> list[int]:
        return self.sizes


def test_actor_decisions_log_and_throttle_push(ray_4cpu_4gpu, tmp_path):
    campaign = f"c-{uuid.uuid4().hex[:6]}"
    settings = BackPressureSettings(enabled=True, warmup_steps=3, ema_decay=0.0, pooled_warmup_rounds=2,
                                    max_capacity=4)
    bp = start_backpressure_actor(campaign, NS, settings, log_path=tmp_path)
    assert start_backpressure_actor(campaign, NS, settings)._actor_id == bp._actor_id  # get_if_exists
    rec = _ResizeRecorder.remote()
    ray.get(bp.set_throttle.remote("ep", rec), timeout=30)
    adv = RemoteAdvisor(bp, "run-a", "ep", timeout_s=30)
    assert adv.initial_batch_size(8) == 1  # warmup sweep starts at min_batch_size
    for step, p in enumerate((4, 8, 12, 50)):
        d = adv.advise(StepObservation("x", step, p, 1, 100.0 * usl_capacity(p, 0.05, 0.005), 1.0))
    assert (d.regime, d.action) == ("retrograde", "throttle")
    assert d.recommended_batch_size == int(0.85 * usl_optimal_p(0.05, 0.005))
    assert d.capacity is not None and d.to_metrics()["bp_pooled_p_star"] == d.pooled_p_star
    table = read_decision_log(tmp_path / "backpressure.arrows")  # readable while the actor writes
    assert table.num_rows == 4 and table.column("run").to_pylist() == ["run-a"] * 4
    assert table.column("action").to_pylist()[-1] == "throttle"
    state = adv.state_dict()
    assert state["controller"]["step_count"] == 4
    adv2 = RemoteAdvisor(bp, "run-b", "ep")
    adv2.load_state_dict(state)
    assert ray.get(bp.state.remote("run-b"), timeout=30) == state
    sizes = ray.get(rec.get.remote(), timeout=30)
    assert sizes and sizes[-1] == d.capacity
    snap = ray.get(bp.snapshot.remote(), timeout=30)
    assert set(snap["runs"]) == {"run-a"} and "ep" in snap["pools"]
    ray.get(bp.close.remote(), timeout=30)


def test_remote_advisor_times_out_and_holds(ray_4cpu_4gpu):
    @ray.remote(num_cpus=0)
    class Stuck:
        def observe(self, obs):
            time.sleep(5)

    adv = RemoteAdvisor(Stuck.remote(), "r", "", timeout_s=0.5)
    d = adv.advise(StepObservation("r", 3, 7, 2, 100, 1.0))
    assert (d.action, d.recommended_batch_size, d.recommended_group_size) == ("hold", 7, 2)


def test_closed_loop_wiring_runs_advisor_actor_and_throttle_together(ray_4cpu_4gpu):
    """3 runs share a simulated endpoint through the throttle and the back-pressure actor on real Ray.
    This checks the wiring only: every step gets a pooled decision, the pooled capacity reaches the
    throttle, the throttle never grants more than its capacity. What the controller decides is tested
    on simulated time (test_backpressure_simulated.py), where a loaded machine cannot move it; here
    every run takes at least 3 steps whatever the clock says, the per-run advisor is off (batch size
    stays 4, so at most 3 slots x 16 items are in flight), and the capacity push (fire and forget
    from the actor) is waited for."""
    campaign = f"loop-{uuid.uuid4().hex[:6]}"
    endpoint = SimulatedEndpoint.remote(0.02, 0.002, 20.0)
    throttle = start_throttle(campaign, "ep", 3, namespace=NS, lease_ttl_s=30.0)
    bp = start_backpressure_actor(campaign, NS, BackPressureSettings(pooled_warmup_rounds=6, max_capacity=3))
    ray.get(bp.set_throttle.remote("ep", throttle), timeout=30)
    ray.get([endpoint.stats.remote(), throttle.stats.remote()], timeout=60)
    start = time.monotonic()
    advisors = [RecordingAdvisor(RemoteAdvisor(bp, f"r{i}", "ep")) for i in range(3)]

    def one(i: int) -> dict:
        return simulated_run(endpoint, advisors[i], ThrottleClient(throttle, f"r{i}", timeout_s=60.0),
                             run_id=f"r{i}", resource="ep", batch_size=4, group_size=4,
                             deadline=start + 6.0, min_steps=3)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one, range(3)))
    assert all(r["steps"] >= 3 and set(r["batch_sizes"]) == {4} for r in results)
    assert all(1 <= cap <= 3 for a in advisors for _, _, cap in a.steps)
    pooled = ray.get(bp.snapshot.remote(), timeout=30)["pools"]["ep"]
    assert pooled["rounds"] >= 1
    wait_for(lambda: ray.get(throttle.stats.remote(), timeout=30).capacity == pooled["capacity"], timeout_s=30,
             what="the pooled capacity to reach the throttle")
    assert ray.get(endpoint.stats.remote(), timeout=30)["peak_in_flight"] <= 3 * 16
    for h in (bp, throttle, endpoint):
        ray.kill(h)


@pytest.mark.parametrize("bad", [dict(sigma=2.0), dict(lam=0.0)])
def test_simulated_endpoint_rejects_bad_parameters(ray_4cpu_4gpu, bad):
    args = {"sigma": 0.1, "kappa": 0.001, "lam": 10.0, **bad}
    with pytest.raises(ray.exceptions.RayActorError, match="SimulatedEndpoint needs"):
        ray.get(SimulatedEndpoint.remote(**args).stats.remote(), timeout=60)


def test_a_killed_back_pressure_actor_is_restarted_and_says_so(ray_4cpu_4gpu, tmp_path):
    import os
    import signal

    from retrain_ray.actors.restarts import read_restarts

    campaign = f"c-{uuid.uuid4().hex[:6]}"
    settings = BackPressureSettings(enabled=True, warmup_steps=3, ema_decay=0.0)
    bp = start_backpressure_actor(campaign, NS, settings, log_path=tmp_path)
    adv = RemoteAdvisor(bp, "run-a", "", timeout_s=60)
    adv.advise(StepObservation("x", 0, 4, 1, 400.0, 1.0))
    os.kill(ray.get(bp.pid.remote(), timeout=30), signal.SIGKILL)
    d = adv.advise(StepObservation("x", 1, 4, 1, 400.0, 1.0))  # retried on the restarted actor
    assert d.recommended_batch_size >= 1
    assert [r["actor"] for r in read_restarts(tmp_path)] == ["back-pressure"]
    assert sorted(p.name for p in tmp_path.glob("backpressure*.arrows")) == ["backpressure.1.arrows", "backpressure.arrows"]
    ray.get(bp.close.remote(), timeout=30)
