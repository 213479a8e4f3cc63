"""The local Ray a campaign driver starts is lean, and the driver keeps torch and the tracker
integrations out of its process (campaign/local_ray.py). Each test runs a driver in its own process,
with its own Ray temp dir, as the CLI does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from campaign_helpers import PYTHON, isolated_env, kill_owned, remove_temp_dir, short_temp_dir, start
from helpers import write_campaign

LEAN = """
import json, sys
import ray
from retrain_ray.campaign.local_ray import connect
import ray.air._internal.usage as air_usage

started = connect(None, dashboard=sys.argv[1:] == ["--dashboard"])
node = ray._private.worker._global_node
print(json.dumps({"started": started, "processes": sorted(node.all_processes),
                  "agent_port": node.dashboard_agent_listen_port,
                  "tag": air_usage.tag_callbacks([object()]),
                  "resources": ray.cluster_resources(), "dashboard_url": node.webui_url,
                  "patched_after": ray._private.node.Node.start_api_server.__name__ != "start_api_server"}))
ray.shutdown()
"""

DRIVER = """
import json, sys
from retrain_ray.campaign import Campaign

results = Campaign.from_toml(sys.argv[1], root=sys.argv[2]).run(progress=False)
print(json.dumps({"errors": len(results.errors), "modules": [m for m in ("torch", "transformers", "peft", "mlflow",
                  "wandb", "tensorboardX") if m in sys.modules],
                  "preloaded": [r.result.get("process_preloaded") for r in results.manifest.runs],
                  "started_before_the_driver_set_up": [r.result["process_started_at"] < results.manifest.sessions[0].started
                                                       for r in results.manifest.runs]}))
"""


def _run(code: str, *args: str, log: Path, timeout_s: float) -> dict:
    """Runs `code` in a new session with its own Ray temp dir; kills whatever of it is left after."""
    ray_tmp = short_temp_dir("rrl")
    proc = start([PYTHON, "-c", code, *args], env=isolated_env(ray_tmp), log=log)
    try:
        rc = proc.wait(timeout=timeout_s)
    finally:
        kill_owned(proc.pid, ray_tmp)
        remove_temp_dir(ray_tmp)
    text = log.read_text()
    assert rc == 0, text[-4000:]
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_a_local_ray_for_a_campaign_starts_without_dashboard_head_log_monitor_autoscaler_or_fixed_agent_port(tmp_path):
    seen = _run(LEAN, log=tmp_path / "lean.log", timeout_s=240)
    assert seen["started"] is True
    assert "gcs_server" in seen["processes"] and "raylet" in seen["processes"]
    assert "log_monitor" not in seen["processes"] and "monitor" not in seen["processes"]
    assert "dashboard" not in seen["processes"] and seen["dashboard_url"] is None
    assert seen["patched_after"] is False  # the next ray.init in this process starts Ray's own way
    assert seen["agent_port"] != 52365  # Ray's fixed default, often held by another Ray on a shared machine
    assert seen["tag"] is False  # Tune's callback usage tag (which imports mlflow, wandb, ...) is skipped
    assert seen["resources"]["CPU"] >= 1


@pytest.mark.timeout(300)
def test_with_the_dashboard_asked_for_the_local_ray_starts_its_dashboard_head(tmp_path):
    seen = _run(LEAN, "--dashboard", log=tmp_path / "full.log", timeout_s=240)
    assert "dashboard" in seen["processes"] and seen["dashboard_url"]


@pytest.mark.extended
@pytest.mark.timeout(600)
def test_a_campaign_driver_never_imports_torch_and_its_trial_starts_in_a_preloaded_process(tmp_path):
    toml = write_campaign(tmp_path / "lean.toml", campaign={"name": "lean", "seeds": [1], "max_steps": 2},
                          training={"batch_size": 2, "group_size": 4, "max_tokens": 4, "save_every": 2},
                          logging={"log_dir": "logs/x"})
    seen = _run(DRIVER, str(toml), str(tmp_path), log=tmp_path / "driver.log", timeout_s=540)
    # the driver loads none of these; the run's trial process is one Ray started as the driver connected
    # (before the driver opened the campaign directory), and it had imported them
    assert seen == {"errors": 0, "modules": [], "preloaded": [True], "started_before_the_driver_set_up": [True]}
    trial_dir = tmp_path / "lean" / "tune" / "grpo+none_s1"
    assert (trial_dir / "result.json").is_file()  # the JSON logger stays: fit()'s ResultGrid reads it
    assert not (trial_dir / "progress.csv").exists() and not list(trial_dir.glob("events.out.tfevents*"))
