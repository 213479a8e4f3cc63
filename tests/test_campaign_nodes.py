"""Multi-node behaviour on a simulated cluster (ray.cluster_utils.Cluster: a head without CPUs or
GPUs, two workers with 2 CPUs and 2 fake GPUs each).

A Cluster cannot share the session Ray, so the scenarios run in a child process
(tests/cluster_scenarios.py, its own session and Ray temp dir) that prints one JSON line; this
test asserts on it and then kills whatever of that process session is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from campaign_helpers import PYTHON, isolated_env, kill_owned, remove_temp_dir, short_temp_dir, start


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    out = tmp_path_factory.mktemp("nodes")
    ray_tmp = short_temp_dir("rrn")
    log = out / "scenarios.log"
    proc = start([PYTHON, "tests/cluster_scenarios.py", str(out)], env=isolated_env(ray_tmp), log=log)
    try:
        proc.wait(timeout=420)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        kill_owned(proc.pid, ray_tmp)
        remove_temp_dir(ray_tmp)
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, text[-4000:]
    return json.loads(lines[-1])


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(480)
def test_split_bundles_land_whole_on_one_node(scenarios):
    split = scenarios["split"]
    assert split["strategy"] == "STRICT_PACK" and split["bundles"] == [{"CPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}]
    first, second = split["nodes_per_group"]
    assert len(first) == 1 and len(second) == 1  # all three bundles of a run on one node
    assert first != second  # each worker has 2 GPUs: the two runs take one worker each
    assert set(first + second) == set(scenarios["workers"])


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(480)
def test_run_on_a_removed_node_finishes_on_the_other(scenarios):
    removal = scenarios["removal"]
    assert "error" not in removal["removed"], removal
    first, *retries = removal["attempt_nodes"]
    assert removal["removed"]["node_id"] == first
    assert retries and all(n != first and n in scenarios["workers"] for n in retries)
    assert removal["status"] == "completed" and removal["attempts"] >= 2 and removal["errors"] == {}
    assert removal["steps"] == list(range(8))  # every step once
