"""A GPU campaign on Ray's own local autoscaling cluster: the GPU worker type starts at zero nodes.

The cluster is the one `ray.cluster_utils.AutoscalingCluster` builds (Ray's fake multi-node provider,
`RAY_FAKE_CLUSTER=1`, with the autoscaler monitor launching real raylets), started here with
`ray start --autoscaling-config` on free ports and its own temp dir rather than through
`AutoscalingCluster`: its `start()` runs `ray stop --force`, which would kill every Ray on a shared
machine, and the wheel lacks the example.yaml it reads, so the same config is written out below.
Cleanup kills only the processes this test started.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from campaign_helpers import (
    PYTHON,
    REPO,
    isolated_env,
    kill_owned,
    remove_temp_dir,
    short_temp_dir,
    start,
)
from helpers import free_port
from ray._private.services import get_node_ip_address

RAY = os.path.join(os.path.dirname(PYTHON), "ray")
GPU_WORKER = {"resources": {"CPU": 2, "GPU": 2, "object_store_memory": 200_000_000}, "node_config": {},
              "min_workers": 0, "max_workers": 1}


def _fake_cluster_config(gcs_address: str) -> dict:
    """Ray's fake_multi_node example config: a CPU-less head and one GPU worker type from zero."""
    lists = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
             "head_start_ray_commands", "worker_start_ray_commands", "cluster_synced_files", "rsync_exclude",
             "rsync_filter")
    return {
        "cluster_name": "fake_multinode", "max_workers": 1,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "gcs_address": gcs_address},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0, "GPU": 0}, "node_config": {}, "max_workers": 0},
            "gpu_worker": GPU_WORKER,
        },
        "head_node_type": "ray.head.default", "auth": {}, "upscaling_speed": 1.0, "idle_timeout_minutes": 10,
        "docker": {}, "file_mounts": {}, "file_mounts_sync_continuously": False, **{k: [] for k in lists},
    }


def _start_autoscaling_head(ray_tmp, tmp_path) -> tuple[subprocess.Popen, str]:
    ip, port = get_node_ip_address(), free_port()
    (tmp_path / "autoscaler.json").write_text(json.dumps(_fake_cluster_config(f"{ip}:{port}")))
    ports = {"--port": port, "--dashboard-agent-listen-port": free_port(), "--metrics-export-port": free_port(),
             "--runtime-env-agent-port": free_port(), "--node-manager-port": free_port(),
             "--object-manager-port": free_port(), "--ray-client-server-port": free_port(),
             "--dashboard-agent-grpc-port": free_port()}
    cmd = [RAY, "start", "--head", "--num-cpus", "0", "--num-gpus", "0", "--include-dashboard", "false",
           "--node-ip-address", ip, "--temp-dir", str(ray_tmp), "--disable-usage-stats",
           f"--autoscaling-config={tmp_path / 'autoscaler.json'}", *[str(x) for kv in ports.items() for x in kv]]
    env = isolated_env(ray_tmp, RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1")
    proc = start(cmd, env=env, log=tmp_path / "ray_start.log")
    assert proc.wait(timeout=180) == 0, (tmp_path / "ray_start.log").read_text()[-3000:]
    return proc, f"{ip}:{port}"


@pytest.mark.extended
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_gpu_campaign_scales_a_gpu_worker_up_from_zero_and_runs_there(tmp_path):
    ray_tmp = short_temp_dir("rra")
    head = None
    try:
        head, address = _start_autoscaling_head(ray_tmp, tmp_path)
        env = isolated_env(ray_tmp, RAY_ADDRESS=address)
        out = subprocess.run([PYTHON, str(REPO / "tests" / "autoscale_scenario.py"), str(tmp_path)], env=env,
                             cwd=REPO, capture_output=True, text=True, timeout=480)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        report = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        if head is not None:
            kill_owned(head.pid, ray_tmp)
        remove_temp_dir(ray_tmp)
    assert report["gpus_at_start"] == 0.0
    assert "waiting for the cluster's autoscaler" in out.stdout
    runs = report["runs"]
    assert len(runs) == 2 and all(r["status"] == "completed" for r in runs.values()), (runs, report["errors"])
    gpu_nodes = {n["id"] for n in report["nodes"] if n["gpus"] > 0}
    assert len(gpu_nodes) == 1, report["nodes"]
    assert {r["node"] for r in runs.values()} == gpu_nodes, "runs must land on the scaled-up GPU worker"
    assert report["head"] not in {r["node"] for r in runs.values()}
    assert sorted(g for r in runs.values() for g in r["gpu_ids"]) == ["0", "1"], "distinct GPU per run"
