"""The schema walk of issue 12 for the sections outside TrainConfig: every `[campaign]` and `[squeeze]` key
has a test here showing its effect (the plan, the schedule, placement, the after-campaign steps, the
squeeze report), and a bad value fails at load naming the key. `test_effects_cover_every_key` fails when a
key is added to config/campaign_schema.py without one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import TINY_CPU, write_campaign
from lora_factors import factors_with_singular_values, write_peft_adapter

from retrain_ray.campaign.capacity.placement import decide_placement
from retrain_ray.campaign.control import StaggerClock
from retrain_ray.campaign.plan import CampaignError, CampaignPlan, build_plan
from retrain_ray.config import CampaignSection, ConfigError, RetrainConfig, SqueezeSection, load_config
from retrain_ray.config.build import build_config
from retrain_ray.squeeze import SqueezeError, SqueezeReport, SqueezeSettings, squeeze_adapter

GRPO = {"advantage_mode": "grpo", "transform_mode": "none"}


def _cfg(**campaign: Any) -> RetrainConfig:
    campaign.setdefault("conditions", [GRPO])
    campaign.setdefault("seeds", [1])
    return RetrainConfig.model_validate({**TINY_CPU, "campaign": campaign})


def _plan(tmp_path: Path, **campaign: Any) -> CampaignPlan:
    return build_plan(_cfg(**campaign), root=tmp_path)


def _seeds(tmp: Path) -> None:
    plan = _plan(tmp, seeds=[3, 5])
    assert plan.seeds == [3, 5] and sorted(r.seed for r in plan.runs) == [3, 5]
    assert {r.config.training.seed for r in plan.runs} == {3, 5}


def _max_steps(tmp: Path) -> None:
    plan = _plan(tmp, max_steps=7)
    assert plan.max_steps == 7 and all(r.config.training.max_steps == 7 for r in plan.runs)


def _parallel(tmp: Path) -> None:
    assert _plan(tmp, seeds=[1, 2, 3]).schedule.max_concurrent == 1
    assert _plan(tmp, seeds=[1, 2, 3], parallel=True).schedule.max_concurrent == 3


def _max_workers(tmp: Path) -> None:
    assert _plan(tmp, seeds=[1, 2, 3], parallel=True, max_workers=2).schedule.max_concurrent == 2


def _stagger_seconds(tmp: Path) -> None:
    seconds = _plan(tmp, stagger_seconds=4.0).schedule.stagger_seconds
    clock = StaggerClock(seconds)  # what each trial's start gate is built with (campaign/driver.py)
    assert [clock.reserve(100.0), clock.reserve(101.0), clock.reserve(110.0)] == [0.0, 3.0, 0.0]


def _summary(tmp: Path) -> None:
    from retrain_ray.campaign.afterwards import run_afterwards
    from retrain_ray.logs.manifest import Manifest

    cdir = tmp / "c"
    cdir.mkdir()
    Manifest.create(cdir, {"name": "c"}, [])
    script = tmp / "summary.py"
    script.write_text("import sys\nprint('got', sys.argv[2:])\n")
    toml = write_campaign(tmp / "c.toml", campaign={"summary_script": str(script), "summary_args": ["a", "b"]})
    run_afterwards(cdir, load_config(toml))
    assert (Manifest.load(cdir).record.summary or {})["returncode"] == 0
    assert "got ['a', 'b']" in (cdir / "summary.log").read_text()


def _conditions(tmp: Path) -> None:
    plan = _plan(tmp, conditions=[GRPO, {"advantage_mode": "maxrl", "transform_mode": "none", "lr": 1e-5}])
    assert plan.conditions == ["grpo+none", "maxrl+none~lr=1e-05"]
    lrs = {r.condition: r.config.training.lr for r in plan.runs}
    assert lrs["maxrl+none~lr=1e-05"] == 1e-5 != lrs["grpo+none"]


def _name(tmp: Path) -> None:
    plan = _plan(tmp, name="mine")
    assert plan.name == "mine" and plan.campaign_dir == (tmp / "mine").resolve()


def _max_failures(tmp: Path) -> None:
    assert _plan(tmp, max_failures=5).schedule.max_failures == 5


def _cpus_per_run(tmp: Path) -> None:
    plan = _plan(tmp, cpus_per_run=2.0)
    d = decide_placement("cpu", cpus_per_run=plan.schedule.cpus_per_run, nodes=[{"CPU": 1.0}],
                         cpu_fallback=False, can_scale=False)
    assert "CPU" in d.problem  # a 2-CPU run does not fit a 1-CPU node
    assert decide_placement("cpu", cpus_per_run=1.0, nodes=[{"CPU": 1.0}], cpu_fallback=False,
                            can_scale=False).problem == ""


def _trial_start_timeout_s(tmp: Path) -> None:
    assert _plan(tmp, trial_start_timeout_s=12.5).schedule.trial_start_timeout_s == 12.5


def _cpu_fallback(tmp: Path) -> None:
    def place(cfg: RetrainConfig):
        return decide_placement("gpu:0", cpus_per_run=1.0, nodes=[{"CPU": 2.0}],
                                cpu_fallback=cfg.campaign.cpu_fallback, can_scale=False)

    assert "cpu_fallback" in place(_cfg()).problem
    on = place(_cfg(cpu_fallback=True))
    assert on.problem == "" and on.warning and on.placement.num_gpus == 0


def _storage(tmp: Path) -> None:
    assert _plan(tmp, name="n").tune_path == f"{(tmp / 'n').resolve()}/tune"
    uri = (tmp / "bucket").as_uri()
    assert _plan(tmp, name="n", storage=uri).tune_path == f"{uri}/n/tune"
    with pytest.raises(CampaignError, match=r"\[campaign\]\.storage"):
        _plan(tmp, storage="just/a/path")


def _tune_copies(tmp: Path) -> None:
    assert _plan(tmp, name="n").pointer_copies
    assert not _plan(tmp, name="n", tune_copies="copy").pointer_copies
    assert not _plan(tmp, name="n", storage=(tmp / "bucket").as_uri()).pointer_copies  # only storage reaches every node


def _adaptive(tmp: Path) -> None:
    grid = _plan(tmp, seeds=[1, 2, 3])
    assert grid.adaptive is None and len(grid.runs) == 3 and grid.reserve == []
    plan = _plan(tmp, seeds=[1, 2, 3], max_steps=8, adaptive={"rungs": [8], "min_seeds": 2, "max_seeds": 3})
    assert [r.seed for r in plan.runs] == [1, 2] and [r.seed for r in plan.reserve] == [3]  # seed 3 only if added
    assert plan.adaptive is not None and plan.adaptive.rungs == (8,)


def _gpu_plan(tmp: Path, **campaign: Any) -> CampaignPlan:
    cfg = RetrainConfig.model_validate({**TINY_CPU, "model": {"model": "builtin:tiny", "finetune": "lora"},
                                        "backend": {"devices": "gpu:0"},
                                        "campaign": {"conditions": [GRPO], "seeds": [1, 2, 3], **campaign}})
    return build_plan(cfg, root=tmp)


def _runs_per_gpu(tmp: Path) -> None:
    assert {r.gpu_share for r in _gpu_plan(tmp).runs} == {1.0}
    plan = _gpu_plan(tmp, runs_per_gpu=2)
    assert {r.gpu_share for r in plan.runs} == {0.5} and plan.packing is not None and plan.packing.groups == [2, 1]


def _gpu_memory_gib(tmp: Path) -> None:
    assert _gpu_plan(tmp, runs_per_gpu=2, gpu_memory_gib=12.0).packing is not None
    with pytest.raises(CampaignError, match="> 8 GiB per card"):  # the default max_tokens' KV: 5.5 GiB a run
        _gpu_plan(tmp, runs_per_gpu=2, gpu_memory_gib=8.0)


def _shared_trainer(tmp: Path) -> None:
    lora = {**TINY_CPU, "model": {"model": "builtin:tiny", "finetune": "lora"}}
    shared = RetrainConfig.model_validate({**lora, "campaign": {"conditions": [GRPO], "seeds": [1, 2],
                                                                "shared_trainer": True}})
    assert build_plan(shared, root=tmp / "shared").shared_trainer
    assert not _plan(tmp / "own", seeds=[1, 2]).shared_trainer
    with pytest.raises(ConfigError, match="finetune"):  # a full fine-tune cannot share one base copy
        _cfg(shared_trainer=True)


CAMPAIGN_EFFECTS: dict[str, Callable[[Path], None]] = {
    "seeds": _seeds, "max_steps": _max_steps, "parallel": _parallel, "max_workers": _max_workers,
    "stagger_seconds": _stagger_seconds, "summary_script": _summary, "summary_args": _summary,
    "conditions": _conditions, "name": _name, "max_failures": _max_failures, "cpus_per_run": _cpus_per_run,
    "trial_start_timeout_s": _trial_start_timeout_s, "cpu_fallback": _cpu_fallback, "storage": _storage,
    "tune_copies": _tune_copies,
    "adaptive": _adaptive, "runs_per_gpu": _runs_per_gpu, "gpu_memory_gib": _gpu_memory_gib,
    "shared_trainer": _shared_trainer,
}


def _adapter(tmp: Path) -> Path:
    """Rank 4, one module with singular values (2, 1): V(1) = 4/5, V(2) = 1."""
    adapter = tmp / "adapter"
    if not adapter.exists():
        write_peft_adapter(adapter, {"m": factors_with_singular_values([2.0, 1.0], 6, 6, 4)}, rank=4)
    return adapter


def _squeeze(tmp: Path, **squeeze: Any) -> SqueezeReport:
    cfg = RetrainConfig.model_validate({"model": {"finetune": "lora", "lora_rank": 4}, "squeeze": squeeze})
    return squeeze_adapter(_adapter(tmp), SqueezeSettings.from_section(cfg.squeeze))


def _adapter_path(tmp: Path) -> None:
    from retrain_ray.cli import main

    toml = tmp / "s.toml"
    toml.write_text(f'[model]\nfinetune = "lora"\nlora_rank = 4\n[squeeze]\nadapter_path = "{_adapter(tmp)}"\n'
                    f'output_path = "{tmp / "out"}"\n')
    assert main(["squeeze", str(toml), "--json"]) == 0
    assert json.loads((tmp / "out" / "squeeze.json").read_text())["adapter"] == str(_adapter(tmp))


def _source_rank(tmp: Path) -> None:
    assert _squeeze(tmp, source_rank=4).source_rank == 4
    with pytest.raises(SqueezeError, match="source_rank = 2"):
        _squeeze(tmp, source_rank=2)


def _target_ranks(tmp: Path) -> None:
    assert _squeeze(tmp).target_ranks == [1, 2, 4]
    assert _squeeze(tmp, target_ranks=[1, 3]).target_ranks == [1, 3]


def _min_variance_retention(tmp: Path) -> None:
    assert _squeeze(tmp).recommended_rank == 2  # V(1) = 0.8 < 0.95
    assert _squeeze(tmp, min_variance_retention=0.8).recommended_rank == 1


def _output_path(tmp: Path) -> None:
    report = _squeeze(tmp, output_path=str(tmp / "elsewhere"))
    assert report.output_path == str(tmp / "elsewhere" / "adapter_r2")
    assert (tmp / "elsewhere" / "adapter_r2" / "adapter_config.json").is_file()
    assert (tmp / "elsewhere" / "squeeze.json").is_file()


def _compress_to(tmp: Path) -> None:
    report = _squeeze(tmp, output_path=str(tmp / "o"), compress_to=3)
    assert report.compressed_rank == 3 and report.recommended_rank == 2
    assert json.loads((tmp / "o" / "adapter_r3" / "adapter_config.json").read_text())["r"] == 3


def _device(tmp: Path) -> None:
    assert _squeeze(tmp, output_path=str(tmp / "o"), device="cpu").compressed_rank == 2
    if not torch.cuda.is_available():  # the SVDs run on the named device
        with pytest.raises((RuntimeError, AssertionError)):
            _squeeze(tmp, output_path=str(tmp / "o"), device="cuda:0")


SQUEEZE_EFFECTS: dict[str, Callable[[Path], None]] = {
    "adapter_path": _adapter_path, "source_rank": _source_rank, "target_ranks": _target_ranks,
    "min_variance_retention": _min_variance_retention, "output_path": _output_path, "compress_to": _compress_to,
    "device": _device,
}


def _keys(model: type) -> set[str]:
    return {info.alias or name for name, info in model.model_fields.items()}


def test_effects_cover_every_key():
    assert _keys(CampaignSection) == set(CAMPAIGN_EFFECTS)
    assert _keys(SqueezeSection) == set(SQUEEZE_EFFECTS)


@pytest.mark.parametrize("key", sorted(CAMPAIGN_EFFECTS))
def test_campaign_key_acts(key, tmp_path):
    CAMPAIGN_EFFECTS[key](tmp_path)


@pytest.mark.parametrize("key", sorted(SQUEEZE_EFFECTS))
def test_squeeze_key_acts(key, tmp_path):
    SQUEEZE_EFFECTS[key](tmp_path)


BAD: dict[tuple[str, str], Any] = {
    ("campaign", "seeds"): [1, 1], ("campaign", "max_steps"): 0, ("campaign", "max_workers"): -1,
    ("campaign", "stagger_seconds"): -1.0, ("campaign", "max_failures"): -1, ("campaign", "cpus_per_run"): 0.0,
    ("campaign", "trial_start_timeout_s"): 0.0, ("campaign", "parallel"): "sometimes",
    ("campaign", "conditions"): [{"advantage_mode": "grpo", "transform_mode": "none", "lrr": 1.0}],
    ("campaign", "typo_key"): 1, ("campaign", "adaptive"): {"rungs": [1], "windw": 3}, ("squeeze", "min_variance_retention"): 1.5, ("squeeze", "source_rank"): -1,
    ("squeeze", "compress_to"): 16, ("squeeze", "typo_key"): 1,
    ("campaign", "runs_per_gpu"): 0, ("campaign", "gpu_memory_gib"): 0.0, ("campaign", "tune_copies"): "twice",
}


@pytest.mark.parametrize(("section", "key"), sorted(BAD))
def test_bad_campaign_and_squeeze_values_fail_at_load_naming_the_key(section, key):
    data: dict[str, Any] = {"model": {"finetune": "lora", "lora_rank": 8}, section: {key: BAD[(section, key)]}}
    with pytest.raises(ConfigError) as info:
        build_config(data)
    assert any(loc.startswith(f"{section}.{key}") for loc in info.value.locations), info.value.locations
