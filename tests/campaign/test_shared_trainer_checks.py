"""`[campaign] shared_trainer = true`: the config-time refusals (checks/shared_trainer.py), each with its reason
and fix, and the members' cross-run check in the campaign plan."""

from __future__ import annotations

import json

import pytest

from retrain_ray.campaign.plan import CampaignError, build_plan
from retrain_ray.config import ConfigError, RetrainConfig

LORA = {"model": {"model": "builtin:tiny", "finetune": "lora"}, "backend": {"devices": "cpu"},
        "training": {"max_steps": 2}}


def campaign(tmp_path, **sections) -> dict:
    data = {**LORA, "logging": {"log_dir": str(tmp_path)},
            "campaign": {"seeds": [1, 2], "max_steps": 2, "shared_trainer": True,
                         "conditions": [{"advantage_mode": "grpo", "transform_mode": "none"}]}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return data


def refusal(tmp_path, **sections) -> str:
    with pytest.raises(ConfigError) as err:
        RetrainConfig.model_validate(campaign(tmp_path, **sections))
    return str(err.value)


def test_a_lora_campaign_of_one_builtin_model_is_accepted(tmp_path):
    cfg = RetrainConfig.model_validate(campaign(tmp_path))
    plan = build_plan(cfg, probe=False)
    assert len(plan.runs) == 2 and cfg.campaign is not None and cfg.campaign.shared_trainer


@pytest.mark.parametrize(("sections", "reason", "fix"), [
    ({"model": {"finetune": "full"}}, "only LoRA runs share", 'finetune = "lora"'),
    ({"backend": {"backend": "tinker"}}, "a remote backend", 'backend = "local"'),
    ({"lora": {"dropout": 0.1}}, "random masks", "dropout = 0"),
    ({"inference": {"engine": "vllm-embedded"}}, "with shared = false", 'engine = "pytorch"'),
    ({"training": {"sft_warmup_steps": 5}}, "RL steps only", "sft_warmup_steps = 0"),
    ({"backend": {"options": {"model_impl": "transformers"}}}, "the lean path loads", "use such a model"),
])
def test_a_run_that_cannot_share_is_refused_with_the_reason_and_the_fix(tmp_path, sections, reason, fix):
    text = refusal(tmp_path, **sections)
    assert "campaign.shared_trainer" in text and reason in text and fix in text
    assert "shared_trainer = false" in text


def test_members_of_other_models_or_targets_are_refused_at_plan_time(tmp_path):
    data = campaign(tmp_path)
    data["campaign"]["conditions"] = [
        {"advantage_mode": "grpo", "transform_mode": "none"},
        {"advantage_mode": "maxrl", "transform_mode": "none", "model": "builtin:tiny-h256-l2",
         "backend_options": {"lora_target_modules": "q_proj,v_proj"}},
    ]
    with pytest.raises(CampaignError) as err:
        build_plan(RetrainConfig.model_validate(data), probe=False)
    text = str(err.value)
    assert "differ in [model] model" in text and "builtin:tiny-h256-l2" in text
    assert "LoRA target modules" in text and "Fix:" in text


def test_a_condition_that_cannot_share_is_refused_naming_its_runs(tmp_path):
    data = campaign(tmp_path)
    data["campaign"]["conditions"] = [{"advantage_mode": "grpo", "transform_mode": "none"},
                                      {"advantage_mode": "grpo", "transform_mode": "none", "lora_dropout": 0.05}]
    with pytest.raises(CampaignError) as err:
        build_plan(RetrainConfig.model_validate(data), probe=False)
    text = str(err.value)
    assert "dropout = 0.05" in text and "lora_dropout=0.05_s1" in text and "grpo+none_s1" not in text


def test_different_ranks_may_share(tmp_path):
    data = campaign(tmp_path)
    data["campaign"]["conditions"] = [{"advantage_mode": "grpo", "transform_mode": "none"},
                                      {"advantage_mode": "grpo", "transform_mode": "none", "lora_rank": 8}]
    assert len(build_plan(RetrainConfig.model_validate(data), probe=False).runs) == 4


def test_without_the_key_nothing_is_refused(tmp_path):
    data = campaign(tmp_path, model={"finetune": "full"})
    data["campaign"]["shared_trainer"] = False
    assert RetrainConfig.model_validate(data).model.finetune == "full"


def write_toml(tmp_path, data) -> str:
    from helpers import config_toml

    path = tmp_path / "c.toml"
    path.write_text(config_toml(base={}, **data))
    return str(path)


def test_explain_shows_the_trainers_and_one_trainers_memory(tmp_path, capsys):
    from retrain_ray.cli.explain import explain_main

    data = campaign(tmp_path, training={"batch_size": 2, "group_size": 4, "max_tokens": 8})
    data["campaign"].update(parallel=True, max_workers=2)
    assert explain_main([write_toml(tmp_path, data), "--json"]) == 0
    shared = json.loads(capsys.readouterr().out)["campaign"]["shared_trainer"]
    assert (shared["runs"], shared["members_per_trainer"], shared["gpus"]) == (2, 2, 0)
    assert shared["plan"][0].startswith("shared trainer: 2 LoRA runs on CPU: per node one trainer")
    memory = shared["plan"][1]
    assert "one base copy" in memory and "2 adapters and AdamW states" in memory and "coalesced batch" in memory
    assert shared["per_trainer_gib"] > 0


def test_a_trainer_that_cannot_fit_its_gpu_is_refused_with_the_numbers(tmp_path, capsys):
    from retrain_ray.cli.explain import explain_main

    data = campaign(tmp_path, backend={"devices": "gpu:0"})
    data["campaign"].update(parallel=True, max_workers=2, runs_per_gpu=2, gpu_memory_gib=0.001)
    with pytest.raises(CampaignError) as err:
        build_plan(RetrainConfig.model_validate(data), probe=False)
    text = str(err.value)
    assert "one trainer cannot fit its GPU" in text and "> 0.001 GiB" in text and "CUDA context 0.5" in text
    assert explain_main([write_toml(tmp_path, data)]) == 2
    assert "one trainer cannot fit its GPU" in capsys.readouterr().err
    data["campaign"]["gpu_memory_gib"] = 80.0  # the default 128 rows x 10,240 tokens, whole-batch: activations
    with pytest.raises(CampaignError) as err:
        build_plan(RetrainConfig.model_validate(data), probe=False)
    assert "set [training] micro_batch_size" in str(err.value)


def test_one_trainer_per_node_or_per_gpu_and_a_run_keeps_its_trainer():
    from retrain_ray.campaign.shared_trainers import trainer_for, trainer_slots

    nodes = [{"NodeID": "a", "Alive": True, "Resources": {"CPU": 4.0, "GPU": 2.0}},
             {"NodeID": "b", "Alive": True, "Resources": {"CPU": 2.0}},
             {"NodeID": "c", "Alive": False, "Resources": {"CPU": 8.0}},
             {"NodeID": "d", "Alive": True, "Resources": {"GPU": 1.0}}]  # no CPU: runs no trial
    cpu = trainer_slots(nodes, gpus=False)
    assert [(s.node_id, s.slot, s.num_gpus) for s in cpu] == [("a", 0, 0.0), ("b", 0, 0.0)]
    gpu = trainer_slots(nodes, gpus=True)
    assert [(s.node_id, s.slot, s.num_gpus) for s in gpu] == [("a", 0, 1.0), ("a", 1, 1.0), ("b", 0, 0.0)]
    trainers = {"a": ("t0", "t1"), "b": ("t2",)}
    picked = {trainer_for(trainers, f"run{i}", "a") for i in range(16)}
    assert picked == {"t0", "t1"} and trainer_for(trainers, "run3", "a") == trainer_for(trainers, "run3", "a")
    with pytest.raises(RuntimeError, match="no shared trainer on node z.*restart the campaign"):
        trainer_for(trainers, "run1", "z")


def test_a_shared_campaigns_trials_hold_no_model_and_no_packing(tmp_path):
    # rows of realistic length: whole-batch forwards of the default 128 rows x 10,240 tokens would not fit a card
    data = campaign(tmp_path, backend={"devices": "gpu:0"}, training={"batch_size": 2, "group_size": 4,
                                                                      "max_tokens": 64})
    data["campaign"].update(parallel=True, max_workers=2, runs_per_gpu=2)
    plan = build_plan(RetrainConfig.model_validate(data), probe=False)
    assert plan.shared_trainer and plan.packing is None
    assert {(r.devices, r.gpus) for r in plan.runs} == {("cpu", 0.0)}
    assert plan.sharing is not None and (plan.sharing.members, plan.sharing.trainers) == (2, 1)


def test_members_reserve_a_tenth_of_a_cpu_unless_cpus_per_run_is_set(tmp_path):
    """A member trial holds no model: a whole CPU each would cap the runs one trainer batches at the node's
    CPUs (2 here, whatever max_workers says); an explicit cpus_per_run is kept."""
    from retrain_ray.campaign.shared_trainers import SHARED_MEMBER_CPUS

    plan = build_plan(RetrainConfig.model_validate(campaign(tmp_path)), probe=False)
    assert {r.cpus for r in plan.runs} == {SHARED_MEMBER_CPUS} == {0.1}
    data = campaign(tmp_path, campaign={"cpus_per_run": 0.5})
    assert {r.cpus for r in build_plan(RetrainConfig.model_validate(data), probe=False).runs} == {0.5}
    data = campaign(tmp_path, campaign={"shared_trainer": False})
    assert {r.cpus for r in build_plan(RetrainConfig.model_validate(data), probe=False).runs} == {1.0}


def test_the_trainers_activations_count_the_training_forward_and_shrink_with_micro_batches(tmp_path):
    """Coalesced training keeps every member's micro-batch of activations (logits included) for the backward:
    the estimate counts it (a SmolLM2 campaign was 17.6 GB against an estimate that counted only the KV
    cache), and micro_batch_size bounds it."""
    from retrain_ray.campaign.capacity.sharing import trainer_memory
    from retrain_ray.models.loading import resolve_model_path

    config = json.loads((resolve_model_path("builtin:tiny") / "config.json").read_text())
    per_token = (config["num_hidden_layers"] * (10 * config["hidden_size"] + 4 * config["intermediate_size"])
                 + 3 * config["vocab_size"])
    training = {"batch_size": 4, "group_size": 8, "max_tokens": 16}
    whole = trainer_memory(RetrainConfig.model_validate(campaign(tmp_path, training=training)), 3, gpu=False)
    micro = trainer_memory(RetrainConfig.model_validate(
        campaign(tmp_path, training={**training, "micro_batch_size": 8})), 3, gpu=False)
    assert whole is not None and micro is not None
    assert whole.activations_gib == pytest.approx(3 * 32 * 2 * 16 * per_token * 4 / 2**30)
    assert micro.activations_gib == pytest.approx(whole.activations_gib / 4)
