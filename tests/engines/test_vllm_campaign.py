"""A campaign of 4 LoRA runs sharing ONE embedded vLLM engine (`[inference] shared = true`).

The engine actor (`<campaign>/vllm`) outlives `run()` (the driver owns it), so the test asks it which
adapter each run samples from: every run has its own, named `<run>-v<version>`. The campaign's
inference throttle (capacity 2) carried every generate call and never let more than 2 in at once.
The engine batches the runs' concurrent requests (a long collection window, so two runs sampling at
once share a batch): the rows record how many runs shared it, the wait, and the adapter sampled from.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import ray
from helpers import write_campaign

from retrain_ray.engines.vllm.core import INSTALL_HINT, vllm_available

pytestmark = [pytest.mark.extended,
              pytest.mark.skipif(not vllm_available(), reason=f"vLLM is not installed: {INSTALL_HINT}")]

SECTIONS = {
    "model": {"model": "builtin:tiny-h256-l2", "finetune": "lora", "lora_rank": 8},
    "backend": {"devices": "cpu", "acquire_timeout_s": 600},
    "inference": {"engine": "vllm-embedded", "shared": True, "max_concurrent": 2, "shared_batch_window_ms": 2000,
                  "engine_args": {"max_model_len": 128}},
    "training": {"batch_size": 2, "group_size": 4, "max_tokens": 4, "lr": 3e-3, "sft_warmup_steps": 1},
}


@pytest.mark.timeout(1500)  # 4 trials and an engine start on 2 shared cores
def test_four_lora_runs_share_one_vllm_engine(ray_4cpu_4gpu, tmp_path):
    from retrain_ray.actors.shared_vllm import shared_engine_name
    from retrain_ray.actors.throttle import get_throttle
    from retrain_ray.campaign import Campaign
    from retrain_ray.campaign.plan import actor_scope

    name = "shared-vllm"
    toml = write_campaign(tmp_path / "c.toml", **SECTIONS, logging={"log_dir": f"{tmp_path}/logs"}, campaign={
        "name": name, "seeds": [1, 2, 3, 4], "max_steps": 3, "parallel": True, "max_workers": 4, "cpus_per_run": 0.5,
        "trial_start_timeout_s": 600})
    results = Campaign.from_toml(toml, root=tmp_path).run(progress=False)
    runs = {r.run_name: r for r in results.runs}
    assert len(runs) == 4 and all(r.status == "completed" for r in runs.values()), runs

    namespace = ray.get_runtime_context().namespace
    scope = actor_scope(name, results.campaign_dir)  # the campaign's actors' names (CampaignPlan.actor_scope)
    engine = ray.get_actor(shared_engine_name(scope), namespace=namespace)
    adapters = {run: ray.get(engine.adapter.remote(run), timeout=60) for run in runs}
    versions = {run: ray.get(engine.version.remote(run), timeout=60) for run in runs}
    for run, adapter in adapters.items():
        assert re.fullmatch(rf"{re.escape(run)}-v{versions[run]}", adapter), (run, adapter)
        assert versions[run] >= 1
    throttle = get_throttle(scope, "inference", namespace)
    stats = dataclasses.asdict(ray.get(throttle.stats.remote(), timeout=30))
    assert stats["granted"] > 0 and stats["peak_in_flight"] <= 2, stats
    figures = ray.get(engine.engine_figures.remote(), timeout=60)
    assert figures["adapters_loaded"] <= 4 and figures["retired_adapters"] == 0, figures  # old versions evicted
    ray.kill(engine)

    rows = [json.loads(line) for f in tmp_path.rglob("metrics.jsonl") for line in f.read_text().splitlines()]
    rl = [r for r in rows if r.get("phase") == "rl"]
    assert rl and all(r["shared_batch_runs"] >= 1 and r["engine_wait_s"] >= 0 for r in rl), rl
    assert max(r["shared_batch_runs"] for r in rl) > 1  # some steps sampled in a batch with another run
    assert all(re.fullmatch(rf"{re.escape(r['run'])}-v\d+", r["sampled_adapter"]) for r in rl), rl
