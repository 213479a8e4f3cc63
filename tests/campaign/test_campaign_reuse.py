"""Tune reuses a trial's process for the next run (`reuse_actors`): a run there computes exactly what
it computes in a fresh process, and each run's torch threads are the CPUs its bundle holds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import write_campaign
from ray import cloudpickle
from safetensors.torch import load_file

from retrain_ray.campaign import Campaign
from retrain_ray.campaign.capacity.placement import placement_for
from retrain_ray.campaign.trial import cpu_threads
from retrain_ray.logs import read_stream

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SECTIONS = {
    "model": {"finetune": None, "lora_rank": 8},
    "reward": {"type": "custom", "custom_module": "operator:lt"},
    "training": {"batch_size": 2, "group_size": 8, "max_tokens": 4, "lr": 3e-3, "save_every": 3},
}
RUN = "maxrl+none_s1"


def threads_runner(config, **kwargs):
    """train_run, with the torch threads the run ran with added to its final metrics."""
    from retrain_ray.run.train import train_run

    outcome = train_run(config, **kwargs)
    outcome.metrics["torch_threads"] = torch.get_num_threads()
    return outcome


def _campaign(tmp_path: Path, name: str, modes: list[str]) -> Path:
    toml = write_campaign(tmp_path / f"{name}.toml", **SECTIONS, logging={"log_dir": f"{tmp_path}/logs/x"},
                          campaign={"name": name, "seeds": [1], "max_steps": 6, "parallel": False, "cpus_per_run": 2,
                                    "max_failures": 0},
                          conditions=[{"advantage_mode": m, "transform_mode": "none"} for m in modes])
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns", runner=threads_runner).run(progress=False)
    assert not results.errors
    return tmp_path / "campaigns" / name


def _run_result(cdir: Path, run: str) -> dict:
    manifest = json.loads((cdir / "manifest.json").read_text())
    return next(r for r in manifest["runs"] if r["run_name"] == run)


def _final_weights(cdir: Path, run: str) -> dict[str, torch.Tensor]:
    final = cdir / "runs" / run / "work" / "checkpoints" / "final"
    files = sorted(final.rglob("*.safetensors"))
    assert files, f"no weights under {final}"
    return {f"{f.relative_to(final)}:{k}": v for f in files for k, v in load_file(f).items()}


MEASURED = ("time", "_share", "per_second", "rss_mb")  # clocks and memory: they differ between any two runs


def _rows(cdir: Path, run: str) -> list[dict]:
    """Every logged value of the run's steps except clocks and memory (extras: the `*_s` timings)."""
    rows = read_stream(cdir / "runs" / run / "metrics.arrows").to_pylist()
    for row in rows:
        for key in [k for k in row if k == "run" or any(m in k for m in MEASURED)]:
            del row[key]
        row["extras"] = [(k, v) for k, v in row["extras"] if not k.endswith("_s")]
    return rows


@pytest.mark.extended
def test_a_run_in_a_reused_process_matches_a_fresh_one_bit_for_bit(ray_4cpu_4gpu, tmp_path):
    fresh = _campaign(tmp_path, "fresh", ["maxrl"])
    reused = _campaign(tmp_path, "reused", ["grpo", "maxrl"])  # one at a time: maxrl+none runs second
    fresh_run, reused_run = _run_result(fresh, RUN), _run_result(reused, RUN)
    assert fresh_run["result"]["process_runs"] == 1
    assert reused_run["result"]["process_runs"] == 2, "Tune did not reuse the trial process"
    assert fresh_run["result"]["torch_threads"] == reused_run["result"]["torch_threads"] == 2  # cpus_per_run
    assert fresh_run["started_at"] < fresh_run["result"]["first_step_at"]
    a, b = _final_weights(fresh, RUN), _final_weights(reused, RUN)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = _rows(fresh, RUN)
    assert len(rows) == 6 and rows == _rows(reused, RUN)


@pytest.mark.parametrize(("cpus", "threads"), [(1.0, 1), (2.0, 2), (3.5, 3), (0.5, 1)])
def test_torch_threads_of_a_run_are_the_cpus_of_its_bundle(cpus, threads):
    from retrain_ray.campaign.plan import RunPlan

    placement, _ = placement_for("cpu", cpus_per_run=cpus, cluster_gpus=0, cpu_fallback=False)
    plan = RunPlan("r", "c", 1, {}, None, Path("."), Path("."), "cpu", placement=placement)
    assert cpu_threads(plan) == threads
