"""Issue 5 acceptance: six campaign runs share one real inference endpoint (Ray Serve on 127.0.0.1)
through the campaign's throttle of capacity `[inference] max_concurrent = 2`.

One campaign proves three things at once (a Serve start and six trial processes are the expensive
part, so they are paid once):
  * the endpoint's own in-flight counter never saw more than 2 completions at once, while the same
    client load without the throttle (measured directly, in the same test) exceeds 2;
  * a run killed (SIGKILL of its trial process) while it holds a lease stalls nobody for good: the
    throttle reclaims the lease after its TTL (`expired` >= 1 in its stats), Tune retries the run
    from its checkpoint, and the campaign completes;
  * every run trained through the endpoint (rows written, adapters uploaded under the run's name).

A second test checks the dashboard gauges (retrain_run_* of a run, retrain_throttle_* of a throttle)
on Ray's metrics endpoint: the session Ray has no metrics export port, so a subprocess starts its own
local Ray with `_metrics_export_port` and polls http://127.0.0.1:<port>/metrics (about 10 s to appear).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import ray
from endpoint_load import endpoint_stats, hammer
from helpers import free_port, wait_for, write_campaign
from ray import cloudpickle

from retrain_ray.campaign import Campaign
from retrain_ray.campaign.plan import actor_scope

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MODEL = "builtin:tiny"
DELAY_S = 0.15  # simulated slow endpoint: requests of different runs really overlap
LEASE_TTL_S = 3.0
SEEDS = [1, 2, 3, 4, 5, 6]
KILL_WAIT_S = 240.0  # as long as a trial may take to start (trial_start_timeout_s): a loaded machine starts them slowly

TRAINING = {"batch_size": 2, "group_size": 2, "max_tokens": 3, "lr": 3e-3, "save_every": 2, "sft_warmup_steps": 1}


@pytest.fixture(scope="module")
def endpoint(ray_4cpu_4gpu):
    from retrain_ray.serve import start_inference_endpoint, stop_inference_endpoint

    url = start_inference_endpoint(MODEL, port=free_port(), name="campaign-endpoint", request_delay_s=DELAY_S)
    yield url
    stop_inference_endpoint()


def pid_recording_runner(config, **kwargs):
    """train_run that first writes its trial process's pid (so the test can SIGKILL it)."""
    from retrain_ray.run.train import train_run

    run_dir = Path(kwargs["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / f"pid.{os.getpid()}").write_text(str(os.getpid()))
    return train_run(config, **kwargs)


class LeaseKiller(threading.Thread):
    """Waits until some run holds a throttle lease, then SIGKILLs that run's trial process."""

    def __init__(self, campaign: str, runs_dir: Path) -> None:
        super().__init__(daemon=True)
        self.campaign, self.runs_dir = campaign, runs_dir
        self.killed: dict = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._hunt()
        except BaseException as err:  # reported by the test
            self.error = err

    def _throttle(self):
        from retrain_ray.actors.throttle import get_throttle

        try:
            scope = actor_scope(self.campaign, self.runs_dir.parent)  # the campaign's actors' names
            return get_throttle(scope, "inference", ray.get_runtime_context().namespace)
        except LookupError:
            return None

    def _kill_a_holder(self, throttle) -> dict | None:
        """SIGKILLs the trial process of a run that holds a lease (once its pid is recorded)."""
        for lease in ray.get(throttle.leases.remote(), timeout=30):
            pids = list((self.runs_dir / lease.holder / "work").glob("pid.*"))
            if len(pids) == 1:
                pid = int(pids[0].read_text())
                os.kill(pid, signal.SIGKILL)
                return {"run": lease.holder, "pid": pid, "lease": lease.lease_id, "at": time.time()}
        return None

    def _hunt(self) -> None:
        deadline = time.monotonic() + KILL_WAIT_S
        throttle = wait_for(self._throttle, timeout_s=KILL_WAIT_S, what="the campaign's inference throttle")
        self.killed = wait_for(lambda: self._kill_a_holder(throttle), timeout_s=deadline - time.monotonic(),
                               what="a run holding a lease with a recorded pid", poll_s=0.05)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 6 trials and a Serve endpoint on 2 shared cores
def test_six_runs_share_an_endpoint_through_a_throttle_of_two_and_survive_a_killed_holder(endpoint, tmp_path):
    control = hammer(endpoint, MODEL)  # the campaign's load shape (6 runs x 2 parallel requests), no throttle
    print(f"without throttle (6 clients x 2 parallel requests): {control}")
    assert control["peak_in_flight"] > 2  # the endpoint's counter sees overlap when nothing limits it

    name = "shared-endpoint"
    toml = write_campaign(
        tmp_path / "c.toml", model={"model": MODEL}, backend={"lease_ttl_s": LEASE_TTL_S, "acquire_timeout_s": 120},
        inference={"engine": "openai", "url": endpoint, "max_concurrent": 2}, training=TRAINING,
        logging={"log_dir": f"{tmp_path}/logs"},
        campaign={"name": name, "seeds": SEEDS, "max_steps": 4, "parallel": True, "max_workers": 6, "cpus_per_run": 0.5,
                  "max_failures": 2, "trial_start_timeout_s": 240})
    endpoint_stats(endpoint, reset=True)
    killer = LeaseKiller(name, tmp_path / name / "runs")
    killer.start()
    started = time.monotonic()
    results = Campaign.from_toml(toml, root=tmp_path, runner=pid_recording_runner).run(progress=False)
    elapsed = time.monotonic() - started
    killer.join(timeout=5)
    stats = endpoint_stats(endpoint)
    throttle_stats = _throttle_stats(actor_scope(name, tmp_path / name))
    print(f"campaign {elapsed:.1f} s; endpoint with throttle(2): {stats}; killed {killer.killed}; "
          f"throttle {throttle_stats}")

    assert killer.error is None, killer.error
    assert stats["peak_in_flight"] <= 2 and stats["requests_total"] > 0
    runs = {r.run_name: r for r in results.runs}
    assert len(runs) == 6 and all(r.status == "completed" for r in runs.values()), runs
    assert runs[killer.killed["run"]].attempts == 2  # Tune retried the killed run
    assert throttle_stats["expired"] >= 1  # the killed holder's lease was reclaimed
    assert throttle_stats["in_flight"] == 0 and throttle_stats["peak_in_flight"] <= 2
    models = {m["id"] for m in httpx.get(f"{endpoint}/v1/models", timeout=30).json()["data"]}
    assert set(runs) <= models  # each run uploaded its weights under its own adapter name


def _throttle_stats(scope: str) -> dict:
    """The stats of the campaign's inference throttle (`scope`: CampaignPlan.actor_scope) (the actor outlives `run()`: the driver owns it)."""
    import dataclasses

    from retrain_ray.actors.throttle import get_throttle

    handle = get_throttle(scope, "inference", ray.get_runtime_context().namespace)
    return dataclasses.asdict(ray.get(handle.stats.remote(), timeout=30))


GAUGE_SCRIPT = r"""
import json, sys, time, urllib.request
import ray
port = int(sys.argv[2])
ray.init(address="local", num_cpus=1, include_dashboard=False, _metrics_export_port=port,
         object_store_memory=80 * 2**20, log_to_driver=False, namespace="gauges")
from retrain_ray.actors.throttle import start_throttle

@ray.remote(num_cpus=0)
class Run:
    def __init__(self):
        from retrain_ray.campaign.dashboard import RunGauges
        self.gauges = RunGauges("gc", "grpo+none_s1", "grpo+none")
    def step(self):
        self.gauges.on_step({"step": 3, "mean_reward": 0.5, "correct_rate": 0.25,
                             "tokens_per_second": 100.0, "step_time_s": 0.1})

started = time.monotonic()
throttle = start_throttle("gc", "inference", 3, namespace="gauges", lease_ttl_s=2.0)
ray.get(throttle.acquire.remote("holder", 10.0), timeout=60)
run = Run.remote()
want = {"ray_retrain_run_mean_reward": 0.5, "ray_retrain_run_step": 3.0,
        "ray_retrain_throttle_capacity": 3.0, "ray_retrain_throttle_in_flight": 0.0,
        "ray_retrain_throttle_expired_leases": 1.0}
seen = {}
while time.monotonic() - started < float(sys.argv[1]) and seen != want:
    ray.get(run.step.remote(), timeout=30)
    time.sleep(1)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        continue
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        if name in want and 'campaign="gc"' in line:
            seen[name] = float(line.rsplit(" ", 1)[1])
print(json.dumps({"seen": seen, "waited_s": time.monotonic() - started}))
ray.shutdown()
"""


@pytest.mark.extended  # over 20 s: the default suite keeps under 15 minutes
@pytest.mark.slow
def test_run_and_throttle_gauges_are_exported_on_the_metrics_port():
    out = subprocess.run([sys.executable, "-c", GAUGE_SCRIPT, "40", str(free_port())], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"gauges: {result}")
    # the holder never renews its 2 s lease: the reaper takes it back and the gauges show it
    assert result["seen"] == {"ray_retrain_run_mean_reward": 0.5, "ray_retrain_run_step": 3.0,
                              "ray_retrain_throttle_capacity": 3.0, "ray_retrain_throttle_in_flight": 0.0,
                              "ray_retrain_throttle_expired_leases": 1.0}
