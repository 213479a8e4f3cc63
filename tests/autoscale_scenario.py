"""A GPU campaign on a local autoscaling cluster, run in its own process by tests/campaign/test_campaign_autoscale.py.

    python tests/autoscale_scenario.py ROOT   (RAY_ADDRESS names the cluster) -> one JSON line

The cluster (started by the test) has a head with no CPUs and no GPUs and one worker type with 2 CPUs
and 2 fake GPUs that starts at zero nodes. Two `gpu:0` runs are submitted; each run records the node
it ran on and the GPU ids Ray gave it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray
from helpers import write_campaign
from ray import cloudpickle

TRAINING = {"batch_size": 2, "group_size": 2, "max_tokens": 4, "lr": 3e-3, "save_every": 2, "sft_warmup_steps": 0}
CAMPAIGN = {"name": "autoscale", "seeds": [1, 2], "max_steps": 2, "parallel": True, "max_workers": 2, "max_failures": 0,
            "trial_start_timeout_s": 240}


def placement_logging_runner(config, **kwargs):
    """train_run that first records the node and the GPU ids of this attempt."""
    from retrain_ray.run.train import train_run

    work = Path(kwargs["run_dir"])
    work.mkdir(parents=True, exist_ok=True)
    record = {"node": ray.get_runtime_context().get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}
    (work / "where.json").write_text(json.dumps(record))
    return train_run(config, **kwargs)


def main(root: str) -> None:
    from retrain_ray.campaign import Campaign

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    root_dir = Path(root)
    toml = write_campaign(root_dir / "autoscale.toml", backend={"devices": "gpu:0"}, training=TRAINING,
                          logging={"log_dir": f"{root_dir}/logs/x"}, campaign=CAMPAIGN)
    ray.init(namespace="retrain-ray", log_to_driver=False)  # RAY_ADDRESS: the autoscaling cluster
    head = ray.get_runtime_context().get_node_id()
    gpus_at_start = ray.cluster_resources().get("GPU", 0.0)
    campaign = Campaign.from_toml(toml, root=root_dir, runner=placement_logging_runner)
    results = campaign.run(progress=True)
    runs = {}
    for run in results.runs:
        where = campaign.campaign_dir / "runs" / run.run_name / "work" / "where.json"
        runs[run.run_name] = {"status": run.status, **json.loads(where.read_text())}
    nodes = [{"id": n["NodeID"], "gpus": n["Resources"].get("GPU", 0.0)} for n in ray.nodes() if n["Alive"]]
    print(json.dumps({"head": head, "gpus_at_start": gpus_at_start, "runs": runs, "nodes": nodes,
                      "errors": results.errors}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
