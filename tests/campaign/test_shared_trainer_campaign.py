"""A LoRA campaign with `[campaign] shared_trainer = true` on the session Ray (real Tune, real train_run, the
tiny built-in model): its runs train and sample on one shared trainer actor, their trials hold no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import GRPO, write_campaign

from retrain_ray.campaign import Campaign

MAXRL = {"advantage_mode": "maxrl", "transform_mode": "none"}


def shared_toml(tmp_path: Path, *, name: str, steps: int = 4, seeds=(1, 2), shared: bool = True) -> Path:
    return write_campaign(
        tmp_path / f"{name}.toml",
        model={"finetune": "lora", "lora_rank": 4}, backend={"devices": "cpu"},
        training={"batch_size": 2, "group_size": 8, "max_tokens": 4, "lr": 3e-3, "save_every": 2},
        reward={"type": "custom", "custom_module": "operator:lt"},  # splits the groups: every step trains
        algorithm=GRPO, logging={"log_dir": f"{tmp_path}/logs/x"},
        campaign={"name": name, "seeds": list(seeds), "max_steps": steps, "parallel": True, "max_workers": 4,
                  "max_failures": 2, "shared_trainer": shared},
        conditions=[GRPO, MAXRL])


@pytest.mark.extended  # about 70 s on the loaded 2-core machine
def test_a_four_run_lora_campaign_trains_on_one_shared_trainer(ray_4cpu_4gpu, tmp_path):
    toml = shared_toml(tmp_path, name="shared4")
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    cdir = tmp_path / "campaigns" / "shared4"
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert manifest["status"] == "done"
    assert [(r["status"], r["attempts"]) for r in manifest["runs"]] == [("completed", 1)] * 4
    for run in results.get_dataframe()["run_name"]:
        rows = results.history(run)
        assert list(rows["step"]) == list(range(4))
        assert rows["loss"].notna().all() and list(rows["weights_version"]) == [0, 1, 2, 3]
        checkpoint = cdir / "runs" / run / "work" / "checkpoints" / "final"
        assert (checkpoint / "adapter" / "adapter_model.safetensors").is_file()
        assert (checkpoint / "optimizer.pt").is_file()
