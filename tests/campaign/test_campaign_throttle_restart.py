"""A campaign whose throttled endpoint (a real Serve inference endpoint, `[inference] max_concurrent = 2`)
has its throttle actor SIGKILLed mid-run loses no run: Ray restarts the throttle, the runs' leases are
re-adopted from their renewals, every run completes in one attempt with every step once, and the
manifest's `control_restarts` names the throttle.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from campaign_helpers import rows_logged, steps_once
from helpers import free_port, write_campaign
from ray import cloudpickle

from retrain_ray.campaign import Campaign

cloudpickle.register_pickle_by_value(sys.modules[__name__])

STEPS = 8
TRAINING = {"batch_size": 2, "group_size": 2, "max_tokens": 3, "lr": 3e-3, "save_every": 2, "sft_warmup_steps": 0}


def _kill_throttle_after_rows(cdir: Path, campaign: str, namespace: str, killed: list[int]) -> None:
    from retrain_ray.actors.throttle import get_throttle
    from retrain_ray.campaign.plan import actor_scope

    deadline = time.monotonic() + 300
    while rows_logged(cdir) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    handle = get_throttle(actor_scope(campaign, cdir), "inference", namespace)
    pid = ray.get(handle.pid.remote(), timeout=60)
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


@pytest.mark.extended  # a Serve endpoint and two trials on shared cores
@pytest.mark.timeout(900)
def test_a_throttle_killed_mid_campaign_costs_no_run(ray_4cpu_4gpu, tmp_path):
    from retrain_ray.serve import start_inference_endpoint, stop_inference_endpoint

    url = start_inference_endpoint("builtin:tiny", port=free_port(), name="throttle-restart", request_delay_s=0.05)
    try:
        name = "throttled"
        toml = write_campaign(
            tmp_path / "c.toml", model={"model": "builtin:tiny"}, training=TRAINING,
            backend={"lease_ttl_s": 3, "acquire_timeout_s": 120},
            inference={"engine": "openai", "url": url, "max_concurrent": 2}, logging={"log_dir": f"{tmp_path}/logs"},
            campaign={"name": name, "seeds": [1, 2], "max_steps": STEPS, "parallel": True, "max_workers": 2,
                      "cpus_per_run": 0.5, "max_failures": 0, "trial_start_timeout_s": 240})
        cdir = tmp_path / name
        killed: list[int] = []
        namespace = ray.get_runtime_context().namespace
        killer = threading.Thread(target=_kill_throttle_after_rows, args=(cdir, name, namespace, killed), daemon=True)
        killer.start()
        results = Campaign.from_toml(toml, root=tmp_path).run(progress=False)
        killer.join(timeout=60)
    finally:
        stop_inference_endpoint()
    assert killed, "the throttle was never killed: the campaign ended first"
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert results.errors == [] and {r["status"] for r in manifest["runs"]} == {"completed"}
    assert {r["attempts"] for r in manifest["runs"]} == {1}  # no run retried: the throttle came back
    assert [r["actor"] for r in manifest["control_restarts"]] == ["throttle inference"]
    for run in manifest["runs"]:
        assert not steps_once(cdir / "runs" / run["run_name"], STEPS)
