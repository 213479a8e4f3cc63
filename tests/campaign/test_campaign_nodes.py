"""Multi-node behaviour on a simulated cluster (ray.cluster_utils.Cluster: a head without CPUs or
GPUs, two workers with 2 CPUs and 2 fake GPUs each).

A Cluster cannot share the session Ray, so the scenarios run in a child process
(tests/cluster_scenarios.py, its own session and Ray temp dir) that prints one JSON line; this
test asserts on it and then kills whatever of that process session is left.
"""

from __future__ import annotations

import pytest
from campaign_helpers import run_scenario


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    return run_scenario("cluster_scenarios.py", tmp_path_factory.mktemp("nodes"), prefix="rrn", timeout_s=420)


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


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(480)
def test_a_trial_on_a_worker_node_imports_the_plugin_the_driver_shipped(scenarios):
    """The driver's ./plugins was renamed away before the run started: the trial (on a worker node, the
    head has no CPUs) could only import the reward plugin from the bundle the driver packed."""
    plugins = scenarios["plugins"]
    assert plugins.get("status") == "completed", plugins
    assert plugins["node"] in scenarios["workers"]
    driver_import, *trial_imports = plugins["imports"]
    assert driver_import == plugins["driver_plugins"] + "/node_reward.py"  # the driver's preflight
    assert trial_imports and all("retrain-ray-plugins" in f and not f.startswith(plugins["driver_plugins"])
                                 for f in trial_imports)
    assert len(plugins["mean_rewards"]) == 2 and all(1000.0 <= r < 1001.0 for r in plugins["mean_rewards"])
