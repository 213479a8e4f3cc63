"""Split placement for real, on the session Ray's fake GPUs: an InferenceActor and a TrainerActor per
run, each on its own GPU bundle; weights cross the object store with a version the sampler confirms.

Fake GPUs schedule exactly like real ones; torch runs on the CPU inside the actors.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import GRPO, write_campaign, write_config

from retrain_ray.campaign import Campaign
from retrain_ray.campaign.trial import PLACEMENT_FILE
from retrain_ray.logs import read_stream

# a real scorer that splits nearly every group of a barely trained model (completion < reference as
# strings), so every RL step carries signal and makes an update; `match` needs ~40 warm-start steps
SECTIONS = {
    "model": {"finetune": "lora"},
    "backend": {"devices": "gpu:0,gpu:1"},
    "reward": {"type": "custom", "custom_module": "operator:lt"},
    "training": {"batch_size": 2, "group_size": 8, "max_tokens": 4, "lr": 3e-3, "save_every": 3, "sft_warmup_steps": 2},
}
SYNC, PIPELINED = "grpo+none_s1", "grpo+none~one_step_off=True_s1"


def rl_rows(results, run: str) -> pd.DataFrame:
    history = results.history(run)
    return history[history["phase"] == "rl"].sort_values("step")


@pytest.fixture(scope="module")
def split_campaign(ray_4cpu_4gpu, tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    toml = write_campaign(
        root / "split.toml", **SECTIONS, logging={"log_dir": f"{root}/logs/x"},
        campaign={"name": "split", "seeds": [1], "max_steps": 6, "parallel": True, "max_workers": 2, "max_failures": 0,
                  "trial_start_timeout_s": 120},
        conditions=[GRPO, {**GRPO, "one_step_off": True}])
    return root, Campaign.from_toml(toml, root=root).run(progress=False)


@pytest.mark.slow
def test_split_runs_get_their_own_gpus_and_log_every_step_once(split_campaign):
    root, results = split_campaign
    assert sorted((r.run_name, r.status, r.placement) for r in results.runs) == [
        (SYNC, "completed", "split"), (PIPELINED, "completed", "split")]
    gpus = []
    for run in (SYNC, PIPELINED):
        (inference, trainer), = json.loads((root / "split" / "runs" / run / "work" / PLACEMENT_FILE).read_text())
        assert (inference["role"], trainer["role"]) == ("inference", "trainer")
        assert len(inference["gpu_ids"]) == 1 and len(trainer["gpu_ids"]) == 1
        assert inference["gpu_ids"] != trainer["gpu_ids"]  # two GPUs per run
        assert inference["node_id"] == trainer["node_id"] and inference["pid"] != trainer["pid"]
        gpus += inference["gpu_ids"] + trainer["gpu_ids"]
        history = results.history(run)
        assert list(history["step"]) == list(range(6))  # every step logged once
        assert list(history["phase"]) == ["sft"] * 2 + ["rl"] * 4
        assert rl_rows(results, run)["mean_reward"].notna().all()
        raw = read_stream(root / "split" / "runs" / run, key=None).to_pandas()
        assert sorted(raw["step"]) == list(range(6))  # written once, not only de-duplicated on read
    assert len(gpus) == 4  # both runs ran at once (max_workers = 2): 4 fake GPUs, each held once
    assert len(set(gpus)) == 4


@pytest.mark.slow
def test_sampler_confirms_a_new_version_after_every_update(split_campaign):
    _, results = split_campaign
    rl = rl_rows(results, SYNC)
    # 2 SFT updates, then one RL update per step: the sampler confirmed version 2, 3, 4, 5
    assert list(rl["weights_version"]) == [2, 3, 4, 5]
    assert list(rl["staleness"]) == [0.0] * 4
    assert rl["loss"].notna().all() and rl["backend_reports_sync_loss"].all()


@pytest.mark.slow
def test_one_step_off_samples_one_update_behind(split_campaign):
    _, results = split_campaign
    rl = rl_rows(results, PIPELINED)
    # step 2: nothing in flight yet; the checkpoint after step 2 (save_every = 3) waits for the update
    # in flight, so step 3 samples from the newest weights; steps 4 and 5 from one update behind
    assert list(rl["weights_version"]) == [2, 3, 3, 4]
    assert list(rl["staleness"]) == [0.0, 0.0, 1.0, 1.0]
    assert not rl["backend_reports_sync_loss"].any()
    assert rl["loss"].isna().tolist() == [True, False, False, False]  # a row's loss is the previous update's


def test_split_sampler_rng_is_captured_and_restored_through_the_proxy(ray_4cpu_4gpu, tmp_path):
    """Checkpoints take the sampler's generator state from `engine.generator`; in split mode that is
    the InferenceActor's, reached through EngineProxy. Restoring it must replay the same samples."""
    import ray
    import torch

    from retrain_ray.actors.run_actors import EngineProxy, InferenceActor
    from retrain_ray.config import load_config
    from retrain_ray.engines.types import SamplingParams
    from retrain_ray.models.context import encode_prompt
    from retrain_ray.run.state import capture_rng_state, engine_generators, restore_rng_state

    run_toml = write_config(tmp_path / "run.toml", **SECTIONS, logging={"log_dir": f"{tmp_path}/logs/x"})
    actor = InferenceActor.remote(load_config(run_toml))
    try:
        proxy = EngineProxy(actor, timeout_s=120)
        prompts = [encode_prompt(ray.get(actor.tokenizer.remote(), timeout=120), "3 + 4 = ")]
        params = SamplingParams(max_tokens=8, temperature=1.0)
        before = proxy.generator.get_state()
        saved = capture_rng_state(engine_generators(proxy))
        first = [s.token_ids for s in proxy.generate(prompts, 8, params)[0]]
        assert not torch.equal(proxy.generator.get_state(), before)  # sampling advanced it
        restore_rng_state(saved, engine_generators(proxy))
        assert [s.token_ids for s in proxy.generate(prompts, 8, params)[0]] == first
    finally:
        ray.kill(actor)
