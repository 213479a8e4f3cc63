"""Several runs per GPU (`[campaign] runs_per_gpu`, campaign/capacity/packing.py): the plan, the
fractional bundles Ray packs onto fake GPUs, the memory check that refuses a packing before Ray
starts, and (extended) a campaign of 8 LoRA runs packed four to a card on 2 fake GPUs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from campaign_helpers import PYTHON, own_session
from helpers import GRPO, write_campaign

from retrain_ray.campaign.capacity.packing import card_groups, gpu_fraction, packed_config, plan_packing
from retrain_ray.campaign.capacity.placement import decide_placement
from retrain_ray.campaign.plan import CampaignError, build_plan
from retrain_ray.config import ConfigError, load_config

LORA = {"model": "builtin:tiny", "finetune": "lora", "lora_rank": 4}
TRAINING = {"batch_size": 2, "group_size": 4, "max_tokens": 4}
EIGHT = {"seeds": [1, 2, 3, 4, 5, 6, 7, 8], "max_steps": 2, "parallel": True}


def packed_toml(path: Path, *, model=LORA, inference=None, **campaign) -> Path:
    return write_campaign(path, campaign={"name": "packed", **EIGHT, **campaign}, conditions=[GRPO], model=model,
                          backend={"devices": "gpu:0"}, training=TRAINING, inference=inference,
                          logging={"log_dir": str(path.parent / "logs")})


def test_fractions_fit_a_card_and_groups_fill_cards_in_order():
    assert [gpu_fraction(n) for n in (1, 2, 4)] == [1.0, 0.5, 0.25]
    assert all(gpu_fraction(n) * n <= 1.0 for n in range(1, 17))  # 1/7, 1/3: floored, so n always fit
    assert card_groups(10, 4) == [4, 4, 2]
    assert card_groups(8, 4) == [4, 4]


def test_plan_packs_eight_lora_runs_onto_two_gpus(tmp_path):
    plan = build_plan(load_config(packed_toml(tmp_path / "c.toml", runs_per_gpu=4)), root=tmp_path)
    assert plan.packing is not None and plan.packing.groups == [4, 4]
    assert {r.gpu_share for r in plan.runs} == {0.25}
    decided = [decide_placement(r.devices, cpus_per_run=1.0, nodes=[{"CPU": 8.0, "GPU": 2.0}], cpu_fallback=False,
                                can_scale=False, gpu_share=r.gpu_share) for r in plan.runs]
    assert {d.problem for d in decided} == {""}
    assert all(d.placement.bundle_dicts == [{"CPU": 1.0, "GPU": 0.25}] for d in decided)
    assert "8 runs on 2 GPUs: 4 + 4" in plan.packing.describe()[0]


def test_runs_of_one_gpu_keep_it_whole_without_packing(tmp_path):
    plan = build_plan(load_config(packed_toml(tmp_path / "c.toml")), root=tmp_path)
    assert plan.packing is None and {r.gpu_share for r in plan.runs} == {1.0}


def test_vllm_memory_share_is_divided_and_the_shared_engine_takes_a_slot(tmp_path):
    cfg = load_config(packed_toml(tmp_path / "c.toml", runs_per_gpu=4,
                                  inference={"engine": "vllm-embedded", "shared": True}))
    assert packed_config(cfg, 4).inference.engine_args["gpu_memory_utilization"] == pytest.approx(0.3 / 4)
    cfg = cfg.model_copy(update={"inference": cfg.inference.model_copy(update={"engine_args": {"gpu_memory_utilization": 0.8}})})
    assert packed_config(cfg, 4).inference.engine_args["gpu_memory_utilization"] == pytest.approx(0.2)
    packing = plan_packing([cfg] * 8, [1] * 8, runs_per_gpu=4, card_gib=80.0)
    assert packing.groups == [4, 4, 1]  # 8 trainers + the engine
    assert "8 runs + the shared vLLM engine on 3 GPUs: 4 + 4 + 1" in packing.describe()[0]


@pytest.mark.parametrize("value", [0, 2.5, "four"])
def test_runs_per_gpu_must_be_a_whole_number_of_at_least_one(tmp_path, value):
    with pytest.raises(ConfigError, match="runs_per_gpu"):
        load_config(packed_toml(tmp_path / "c.toml", runs_per_gpu=value))


def test_packed_bundles_share_fake_gpus_four_to_a_card(ray_4cpu_4gpu):
    """Ray gives the runs of one card the same GPU id: CUDA_VISIBLE_DEVICES is how a trial sees it."""
    ray = ray_4cpu_4gpu
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from retrain_ray.campaign.capacity.placement import placement_for

    placement, _ = placement_for("gpu:0", cpus_per_run=0.25, cluster_gpus=4.0, gpu_share=gpu_fraction(4))
    assert placement.bundle_dicts == [{"CPU": 0.25, "GPU": 0.25}]

    @ray.remote
    def visible():
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    groups = [placement_group(placement.bundle_dicts, strategy=placement.strategy) for _ in range(8)]
    try:
        ray.get([g.ready() for g in groups], timeout=60)
        seen = [ray.get(visible.options(num_cpus=0.25, num_gpus=0.25, scheduling_strategy=PlacementGroupSchedulingStrategy(
            g, placement_group_bundle_index=0)).remote(), timeout=60) for g in groups]
    finally:
        for g in groups:
            remove_placement_group(g)
    assert sorted(Counter(seen).values()) == [4, 4]  # two cards, four runs on each


def test_impossible_packing_is_refused_before_ray_with_the_numbers(tmp_path, capsys):
    from retrain_ray.campaign import Campaign
    from retrain_ray.cli import main
    from retrain_ray.cli.explain import explain_main

    toml = packed_toml(tmp_path / "c.toml", runs_per_gpu=4, gpu_memory_gib=1.5)
    with pytest.raises(CampaignError) as err:
        Campaign.from_toml(toml, root=tmp_path)
    message = str(err.value)
    assert "runs_per_gpu = 4 cannot fit the model" in message
    assert "x 4 = 2.0 GiB > 1.5 GiB per card" in message and "lower [campaign] runs_per_gpu to 2" in message
    assert not (tmp_path / "packed").exists()  # nothing written
    assert explain_main([str(toml)]) == 2
    assert main([str(toml)]) == 2
    stderr = capsys.readouterr().err
    assert stderr.count("cannot fit the model") == 2 and "Traceback" not in stderr


def test_a_large_model_names_its_parameters_and_the_fix(tmp_path):
    folder = tmp_path / "llama7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
        "torch_dtype": "bfloat16", "tie_word_embeddings": False}))
    cfg = load_config(packed_toml(tmp_path / "c.toml", model={"model": str(folder), "finetune": "lora", "lora_rank": 8},
                                  runs_per_gpu=4))
    [problem] = plan_packing([cfg] * 8, [1] * 8, runs_per_gpu=4, card_gib=80.0).problems()
    assert "6.74B parameters" in problem and "> 80 GiB per card" in problem
    assert "lower [campaign] runs_per_gpu to 3 (the most that fit)" in problem
    assert plan_packing([cfg] * 8, [1] * 8, runs_per_gpu=3, card_gib=80.0).problems() == []


@pytest.mark.extended
@pytest.mark.timeout(900)
def test_eight_lora_runs_run_packed_on_two_fake_gpus(tmp_path):
    """tests/packing_scenario.py: its own Ray of 2 fake GPUs (about 4 minutes on 2 cores)."""
    log = tmp_path / "scenario.log"
    with own_session([PYTHON, "tests/packing_scenario.py", str(tmp_path)], log=log, prefix="rrpk") as (proc, _):
        try:
            proc.wait(timeout=840)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, text[-4000:]
    out = json.loads(lines[-1])
    assert out["groups"] == [4, 4] and out["errors"] == {}
    assert set(out["status"].values()) == {"completed"}
    assert all(b == [{"CPU": 1.0, "GPU": 0.25}] for b in out["bundles"].values())
    seen = out["seen"].values()
    assert all(s["bundles"] == [{"CPU": 1.0, "GPU": 0.25}] for s in seen)
    assert sorted(Counter(s["cuda_visible_devices"] for s in seen).values()) == [4, 4]


def test_explain_shows_the_packing_and_what_each_run_gets(tmp_path, capsys):
    from retrain_ray.cli.explain import explain_main

    toml = packed_toml(tmp_path / "c.toml", runs_per_gpu=4, inference={"engine": "vllm-embedded"})
    assert explain_main([str(toml), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    packing = info["campaign"]["packing"]
    assert (packing["groups"], packing["gpu_fraction"], packing["gpus"]) == ([4, 4], 0.25, 2)
    assert packing["vllm_gpu_memory_utilization"] == pytest.approx(0.075)
    assert info["run"]["resources_per_run"]["gpus"] == 0.25
    assert packing["plan"][0].startswith("packing: 8 runs on 2 GPUs: 4 + 4")
    assert "vLLM gpu_memory_utilization 0.075 (6.0 GiB)" in packing["plan"][1]
