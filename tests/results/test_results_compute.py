"""GPU- and CPU-hours spent and saved (results/compute.py): the arithmetic by hand, the shares the plan
records per run (runs_per_gpu = 4: 0.25), on the recorded campaign, and manifests written before them."""

from __future__ import annotations

import json

import pytest
from helpers import GRPO, write_campaign
from recorded_campaign import SECONDS_PER_STEP, STEPS, recorded_campaign_dir

from retrain_ray.campaign.afterwards import record_compute
from retrain_ray.campaign.observer import CampaignObserver
from retrain_ray.campaign.plan import build_plan, run_record
from retrain_ray.cli.results import results_main
from retrain_ray.config import load_config
from retrain_ray.logs.manifest import MANIFEST, AdaptiveRecord, CampaignRecord, Manifest, read_manifest
from retrain_ray.results.campaign_results import CampaignResults
from retrain_ray.results.compute import RunCompute, compute_used, describe


def test_gpu_hours_by_hand():
    # 4 runs packed 4 to a card, 100 steps at 36 s = 1 h each: 4 x 0.25 x 1 h = 1 GPU-hour, 4 x 2 x 1 h = 8 CPU-hours
    manifest = read_manifest_like(grid_steps=None)
    used = compute_used(manifest, {f"r{i}": RunCompute(100, 36.0, 0.25, 2.0) for i in range(4)})
    assert (used.gpu_hours, used.cpu_hours, used.runs_unknown, used.adaptive) == (1.0, 8.0, 0, False)
    assert describe(used) == ["compute spent: 1 GPU-hours, 8 CPU-hours over 4 runs (GPUs held x wall time per run)"]


def test_saved_against_the_full_grid_by_hand():
    # grid 600 steps, 400 run: 200 steps x 36 s = 2 h, on 0.25 GPU and 2 CPUs: 0.5 GPU-hours, 4 CPU-hours
    manifest = read_manifest_like(grid_steps=600)
    used = compute_used(manifest, {f"r{i}": RunCompute(100, 36.0, 0.25, 2.0) for i in range(4)})
    assert (used.saved_steps, used.saved_gpu_hours, used.saved_cpu_hours) == (200, 0.5, 4.0)
    assert describe(used)[-1] == ("saved against the full grid: 200 steps not run, 0.5 GPU-hours, 4 CPU-hours "
                                  "(at the measured time per step)")


def test_cpu_only_says_so():
    used = compute_used(read_manifest_like(grid_steps=None), {"r": RunCompute(100, 36.0, 0.0, 4.0)})
    assert describe(used)[0].startswith("compute spent: 0 GPU-hours (CPU only), 4 CPU-hours over 1 runs")


def read_manifest_like(grid_steps: int | None) -> CampaignRecord:
    adaptive = None if grid_steps is None else AdaptiveRecord(plan={"grid_steps": grid_steps})
    return CampaignRecord(runs=(), adaptive=adaptive)


def test_the_plan_records_each_runs_share(tmp_path):
    toml = write_campaign(tmp_path / "c.toml", campaign={"name": "packed", "seeds": [1, 2, 3, 4], "max_steps": 2,
                                                         "parallel": True, "runs_per_gpu": 4, "cpus_per_run": 2},
                          conditions=[GRPO], model={"model": "builtin:tiny", "finetune": "lora", "lora_rank": 4},
                          backend={"devices": "gpu:0"}, training={"batch_size": 2, "group_size": 4, "max_tokens": 4},
                          logging={"log_dir": str(tmp_path / "logs")})
    plan = build_plan(load_config(toml), root=tmp_path)
    assert {(run_record(r).gpus, run_record(r).cpus) for r in plan.runs} == {(0.25, 2.0)}


def test_the_recorded_campaign_spent_and_saved(tmp_path_factory):
    campaign_dir = recorded_campaign_dir(tmp_path_factory, "compute")
    manifest = Manifest.load(campaign_dir)
    for run in manifest.record.runs:
        manifest.update_run(run.run_name, gpus=0.25, cpus=1.0)
    manifest.update(adaptive=AdaptiveRecord(plan={"grid_steps": 120}))
    used = CampaignResults.from_dir(campaign_dir).compute()
    wall_s = STEPS * SECONDS_PER_STEP  # 12 logged steps, 2 s apart
    assert used.gpu_hours == pytest.approx(6 * 0.25 * wall_s / 3600)
    assert used.cpu_hours == pytest.approx(6 * wall_s / 3600)
    assert used.saved_steps == 120 - 6 * STEPS
    assert used.saved_gpu_hours == pytest.approx(48 * SECONDS_PER_STEP * 0.25 / 3600)


def test_an_old_manifest_still_reads(tmp_path_factory, capsys):
    campaign_dir = recorded_campaign_dir(tmp_path_factory, "old")
    data = json.loads((campaign_dir / MANIFEST).read_text())
    for run in data["runs"]:
        run.pop("gpus", None)
        run.pop("cpus", None)
    (campaign_dir / MANIFEST).write_text(json.dumps(data))
    assert all(r.gpus is None for r in read_manifest(campaign_dir).runs)
    assert results_main([str(campaign_dir)]) == 0
    assert "compute spent: unknown: the manifest predates the GPUs and CPUs recorded per run (6 runs)" in (
        capsys.readouterr().out)


def test_the_manifest_records_compute_when_the_campaign_ends(tmp_path_factory):
    campaign_dir = recorded_campaign_dir(tmp_path_factory, "afterwards")
    manifest = Manifest.load(campaign_dir)
    for run in manifest.record.runs:
        manifest.update_run(run.run_name, gpus=0.0, cpus=2.0)
    record_compute(campaign_dir, CampaignObserver())
    compute = read_manifest(campaign_dir).compute
    assert compute is not None and compute["gpu_hours"] == 0.0
    assert compute["cpu_hours"] == pytest.approx(6 * 2.0 * STEPS * SECONDS_PER_STEP / 3600)
