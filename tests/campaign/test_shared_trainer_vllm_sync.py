"""`[campaign] shared_trainer = true` with the campaign's shared vLLM engine sampling (`[inference] engine =
"vllm-embedded"`, `shared = true`), without vLLM: the config checks, `explain`'s plan, and the weight sync's
plumbing (campaign/shared_trainer_policy.py `member_policy(..., sampler=...)`).

The plumbing test runs a real 2-step run through `train_run` with the shared trainer actor as its backend and,
as its sampler, a PyTorch engine holding its OWN copy of the model (what the shared vLLM engine is to the trainer:
a second copy fed tensors): the run loop's sync must carry the member's whole adapter from the trainer, so the
copy samples step 2 from exactly the adapter the trainer's step-1 checkpoint holds. The vLLM engine itself is
tested in tests/engines/test_shared_trainer_vllm.py (extended tier).
"""

from __future__ import annotations

import json

import pytest
import ray
import torch
from safetensors.torch import load_file

from retrain_ray.actors.shared_trainer import TrainerSpec, start_shared_trainer
from retrain_ray.backends.local.policy import build_local_policy, settings_from_config
from retrain_ray.campaign.plan import build_plan
from retrain_ray.campaign.shared_trainer_policy import member_policy
from retrain_ray.config import ConfigError, RetrainConfig
from retrain_ray.run.train import train_run
from retrain_ray.shared_trainer import SharedTrainer

TIMEOUT_S = 120.0
VLLM_SHARED = {"engine": "vllm-embedded", "shared": True}


def campaign(tmp_path, *, inference=None, backend=None) -> dict:
    return {"model": {"model": "builtin:tiny", "finetune": "lora"}, "backend": {"devices": "cpu", **(backend or {})},
            "inference": inference or {}, "logging": {"log_dir": str(tmp_path)},
            "campaign": {"seeds": [1, 2], "max_steps": 2, "shared_trainer": True,
                         "conditions": [{"advantage_mode": "grpo", "transform_mode": "none"}]}}


def refusal(data: dict) -> str:
    with pytest.raises(ConfigError) as err:
        RetrainConfig.model_validate(data)
    return str(err.value)


def test_the_shared_vllm_engine_may_sample_for_a_shared_trainer_on_cpu(tmp_path):
    plan = build_plan(RetrainConfig.model_validate(campaign(tmp_path, inference=VLLM_SHARED)), probe=False)
    assert plan.sharing is not None and plan.sharing.vllm
    said = "\n".join(plan.sharing.describe())
    assert "the campaign's shared vLLM engine samples" in said and "synced from the trainer" in said
    assert plan.sharing.to_json()["sampler"] == "vllm-embedded (shared)"
    pytorch = build_plan(RetrainConfig.model_validate(campaign(tmp_path)), probe=False).sharing
    assert pytorch is not None and not pytorch.vllm and "PyTorch engine on its own copy" in pytorch.describe()[0]


def test_the_trainer_holds_no_sampling_cache_when_vllm_samples(tmp_path):
    base = {"training": {"batch_size": 8, "group_size": 16, "max_tokens": 256, "micro_batch_size": 1}}
    vllm = build_plan(RetrainConfig.model_validate({**campaign(tmp_path, inference=VLLM_SHARED), **base}), probe=False)
    own = build_plan(RetrainConfig.model_validate({**campaign(tmp_path), **base}), probe=False)
    assert vllm.sharing is not None and own.sharing is not None
    assert vllm.sharing.memory is not None and own.sharing.memory is not None
    assert vllm.sharing.memory.activations_gib < own.sharing.memory.activations_gib  # 128 rows' KV, not 1 row


@pytest.mark.parametrize(("inference", "backend", "reason", "fix"), [
    ({"engine": "vllm-embedded"}, {}, "with shared = false: a member's trial holds no model",
     "set [inference] shared = true"),
    (VLLM_SHARED, {"devices": "gpu:0"}, "takes each GPU whole", 'set [backend] devices = "cpu"'),
    ({"engine": "vllm"}, {}, "or from the campaign's shared vLLM engine",
     '"vllm-embedded" with shared = true'),
])
def test_what_the_shared_vllm_engine_cannot_do_is_refused(tmp_path, inference, backend, reason, fix):
    text = refusal(campaign(tmp_path, inference=inference, backend=backend))
    assert "campaign.shared_trainer" in text and reason in text and fix in text, text
    assert "shared_trainer = false" in text


def test_export_adapter_carries_the_frozen_a_matrices_that_vllm_needs():
    cfg = RetrainConfig.model_validate({"model": {"model": "builtin:tiny", "finetune": "lora"},
                                        "backend": {"devices": "cpu", "options": {"lora_freeze_a": True}}})
    settings = settings_from_config(cfg)
    trainer = SharedTrainer.load("builtin:tiny", settings.lora)
    trainer.add_run("r", settings)
    weights, adapter = trainer.export_weights("r"), trainer.export_adapter("r")
    assert not any(".lora_A." in n for n in weights.tensors)  # the trainable weights: B only
    assert adapter.version == weights.version == 0
    assert adapter.tensors.keys() == trainer.adapter_tensors("r").keys()
    assert sum(".lora_A." in n for n in adapter.tensors) == sum(".lora_B." in n for n in adapter.tensors) > 0


def run_config(tmp_path) -> RetrainConfig:
    return RetrainConfig.model_validate({
        "model": {"model": "builtin:tiny", "finetune": "lora", "lora_rank": 4}, "backend": {"devices": "cpu"},
        "data": {"source": "builtin", "task": "first_digit"}, "reward": {"type": "custom", "custom_module": "operator:lt"},
        "training": {"seed": 5, "max_steps": 2, "batch_size": 2, "group_size": 4, "max_tokens": 4, "lr": 3e-2,
                     "save_every": 1, "keep_last_checkpoints": 3, "sft_warmup_steps": 0},
        "logging": {"log_dir": str(tmp_path / "logs")}})


def lora_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n.replace(".default", ""): p.detach().clone() for n, p in model.named_parameters() if ".lora_" in n}


@pytest.mark.extended  # real Ray and a 2-step run: ~11 s of the default tier's budget; CI runs it
def test_a_sampler_with_its_own_copy_samples_each_step_from_the_trainers_adapter(ray_4cpu_4gpu, tmp_path):
    cfg = run_config(tmp_path)
    spec = TrainerSpec(model="builtin:tiny", layout=settings_from_config(cfg).lora, threads=1)
    trainer = start_shared_trainer(spec, name=f"test/shared_trainer/{tmp_path.name}", namespace="vsync-test",
                                   members=1, node_id=ray.get_runtime_context().get_node_id(), num_gpus=0,
                                   campaign_dir=tmp_path)
    own_copy = build_local_policy(cfg, device="cpu")  # a second model, as the vLLM engine holds one
    initial = lora_of(own_copy.engine.model)
    try:
        with member_policy(cfg, trainer, "run-v", timeout_s=TIMEOUT_S, sampler=own_copy.engine) as policy:
            update = policy.backend.export_weights()
            assert policy.engine is own_copy.engine and update.version == 0 and update.tensors  # tensors travel,
            assert all(".lora_" in n for n in update.tensors)  # the adapter's only: no base weight moves
            outcome = train_run(cfg, run_name="run-v", run_dir=tmp_path / "run", policy=policy)
            assert policy.backend.version == 2
    finally:
        ray.kill(trainer, no_restart=True)
    assert outcome.status == "completed", outcome
    assert own_copy.engine.weights_version == 1  # step 2 sampled from the adapter after step 1
    synced = lora_of(own_copy.engine.model)
    step1 = {n: t for n, t in checkpoint_adapter(tmp_path, step=1).items()}
    assert synced.keys() == step1.keys()
    assert all(torch.equal(synced[n], step1[n]) for n in step1), "the copy holds another adapter than step 1's"
    assert any(not torch.equal(synced[n], initial[n]) for n in initial)  # the sync moved it
    rows = [json.loads(line) for f in tmp_path.rglob("metrics.jsonl") for line in f.read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("phase") == "rl"] == [0, 1], rows  # two steps, 0-based


def checkpoint_adapter(root, *, step: int) -> dict[str, torch.Tensor]:
    found = [f for f in root.rglob("adapter_model.safetensors") if f"step_{step}" in str(f) or f"{step:06d}" in str(f)]
    assert len(found) == 1, sorted(str(f) for f in root.rglob("adapter_model.safetensors"))
    return load_file(str(found[0]))
