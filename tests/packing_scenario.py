"""Eight LoRA runs packed four to a card on a Ray of 2 fake GPUs, run in a process of its own by
tests/campaign/test_packing.py (the session's Ray has 4 fake GPUs; this one must have exactly 2).

    python tests/packing_scenario.py OUT_DIR   -> prints one JSON line with what each run saw

The campaign's runs ask for `gpu:0` with `[campaign] runs_per_gpu = 4`; each trial records the
GPU ids Ray gave it (CUDA_VISIBLE_DEVICES) and its placement group's bundles, then trains the
built-in tiny model on CPU (the GPUs are fake), a few steps.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import ray
from helpers import GRPO, write_campaign

TRAINING = {"batch_size": 2, "group_size": 4, "max_tokens": 4, "lr": 3e-3}
SEEDS = [1, 2, 3, 4, 5, 6, 7, 8]
GPU_FILE = "gpu.json"


def recording_runner(config, **kwargs):
    """train_run on CPU after writing what Ray gave the trial: its GPU ids and its bundles."""
    from ray.util import get_current_placement_group

    from retrain_ray.run.train import train_run

    work = Path(kwargs["run_dir"])
    work.mkdir(parents=True, exist_ok=True)
    group = get_current_placement_group()
    (work / GPU_FILE).write_text(json.dumps({
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "bundles": group.bundle_specs if group is not None else None,
    }))
    on_cpu = config.model_copy(update={"backend": config.backend.model_copy(update={"devices": "cpu"})})
    return train_run(on_cpu, **kwargs)


def main(out: Path) -> None:
    from retrain_ray.campaign import Campaign

    toml = write_campaign(out / "packed.toml", campaign={"name": "packed", "seeds": SEEDS, "max_steps": 2,
                                                         "parallel": True, "runs_per_gpu": 4},
                          conditions=[GRPO], model={"model": "builtin:tiny", "finetune": "lora", "lora_rank": 4},
                          backend={"devices": "gpu:0"}, training=TRAINING, logging={"log_dir": f"{out}/logs"})
    ray.init(address="local", num_cpus=len(SEEDS), num_gpus=2, include_dashboard=False, log_to_driver=False)
    campaign = Campaign.from_toml(toml, root=out, runner=recording_runner)
    results = campaign.run(progress=False)
    seen = {}
    for run in campaign.plan.runs:
        path = run.work_dir / GPU_FILE
        seen[run.run_name] = json.loads(path.read_text()) if path.is_file() else None
    print(json.dumps({
        "groups": campaign.plan.packing.groups if campaign.plan.packing else None,
        "bundles": {r.run_name: r.placement.bundle_dicts if r.placement else None for r in campaign.plan.runs},
        "status": {r.run_name: r.status for r in results.runs},
        "errors": results.error_by_run,
        "seen": seen,
    }))
    ray.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
