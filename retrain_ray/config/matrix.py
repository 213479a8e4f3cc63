"""The run matrix of a campaign: conditions x seeds, conditions outer (spec 5.1). Pure, no I/O.

Labels are `{adv}+{tx}` plus `~k=v,...` over sorted overrides; run names are `{label}_s{seed}`.
Each run gets the WHOLE base config (every table, params and options included; fixes the original's
hazard 13.1) with the condition applied, then:

* `training.max_steps = [campaign].max_steps`. This is the original's behaviour and easy to misread
  (hazard 13.4): `[campaign].max_steps` defaults to 500 and REPLACES `[training].max_steps` of the
  same file; set it in `[campaign]` to shorten a campaign.
* `training.seed` = the run's seed.
* its own `logging.log_dir` and `backend.adapter_path` (hazard 13.2: the original shared one adapter
  directory across runs): `run_dir(run_name)` and `run_dir(run_name)/adapter` when the caller passes
  `run_dir`, else `<base log_dir>/<run_name>` and `<base adapter_path>/<run_name>`.
* with `logging.wandb_project` set: wandb run name = run name, tags = `label,seed<seed>`. The W&B group
  stays as the base config sets it; empty, the tracker uses the campaign name (the original set the
  group to the label; here the condition is the W&B job_type, so a campaign is one group).

A run's config has no [campaign] or [squeeze]: it describes one run. A plain (non-campaign) config
expands to one run whose config is unchanged unless `run_dir` is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrain_ray.config.campaign_schema import CampaignCondition, run_name
from retrain_ray.config.errors import ConfigError, ConfigIssue
from retrain_ray.config.overrides import apply_condition
from retrain_ray.config.schema import RetrainConfig

RunDirFn = Callable[[str], Path]


@dataclass(frozen=True)
class RunSpec:
    """One run of a campaign. Frozen and picklable (sent to Ray trials)."""

    run_name: str
    condition_label: str
    seed: int
    condition_overrides: dict[str, Any] = field(default_factory=dict)
    config: RetrainConfig = field(default_factory=RetrainConfig)


def condition_label(condition: CampaignCondition | dict[str, Any]) -> str:
    """Label of a condition, e.g. `maxrl+gtpo_sepa~uncertainty_kind=predictive_variance`."""
    if not isinstance(condition, CampaignCondition):
        condition = CampaignCondition.model_validate(condition)
    return condition.label


def _finish(cfg: RetrainConfig, name: str, label: str, seed: int, max_steps: int,
            run_dir: RunDirFn | None, rungs: list[int] | None = None) -> RetrainConfig:
    """One run's config; an adaptive campaign's `rungs` become checkpoint steps (a run reports at a checkpoint)."""
    if run_dir is not None:
        log_dir, adapter = Path(run_dir(name)), Path(run_dir(name)) / "adapter"
    else:
        log_dir, adapter = Path(cfg.logging.log_dir) / name, Path(cfg.backend.adapter_path) / name
    logging = {"log_dir": str(log_dir)}
    if cfg.logging.wandb_project:
        logging.update(wandb_run_name=name, wandb_tags=f"{label},seed{seed}")
    updated = cfg.model_copy(update={
        "training": cfg.training.model_copy(update={"seed": seed, "max_steps": max_steps,
                                                    "checkpoint_steps": _with_rungs(cfg.training.checkpoint_steps, rungs)}),
        "backend": cfg.backend.model_copy(update={"adapter_path": str(adapter)}),
        "logging": cfg.logging.model_copy(update=logging),
        "campaign": None,
        "squeeze": None,
    })
    return RetrainConfig.model_validate(updated.model_dump())  # re-run the cross-key rules


def _with_rungs(steps: list[int], rungs: list[int] | None) -> list[int]:
    return sorted({*steps, *(rungs or [])})


def conditioned_configs(cfg: RetrainConfig) -> list[RetrainConfig]:
    """The base config (no [campaign]/[squeeze]) under each condition; raises one ConfigError
    naming every condition that does not validate, as `campaign.conditions[i] (label): key`."""
    assert cfg.campaign is not None
    base = cfg.model_copy(update={"campaign": None, "squeeze": None})
    configs: list[RetrainConfig] = []
    issues: list[ConfigIssue] = []
    for i, condition in enumerate(cfg.campaign.conditions):
        try:
            configs.append(apply_condition(base, condition))
        except ConfigError as exc:
            issues += [ConfigIssue(f"campaign.conditions[{i}] ({condition.label}): {x.location}", x.value,
                                   x.message, x.hint) for x in exc.issues]
    if issues:
        raise ConfigError(issues)
    return configs


def expand_runs(cfg: RetrainConfig, run_dir: RunDirFn | None = None) -> list[RunSpec]:
    """Every run of a campaign (or the single run of a plain config), conditions outer."""
    if cfg.campaign is None:
        label = f"{cfg.algorithm.advantage_mode}+{cfg.algorithm.transform_mode}"
        seed = cfg.training.seed
        name = run_name(label, seed)
        one = cfg if run_dir is None else _finish(cfg, name, label, seed, cfg.training.max_steps, run_dir)
        return [RunSpec(name, label, seed, {}, one)]
    runs = []
    adaptive = cfg.campaign.adaptive
    rungs = list(adaptive.rungs) if adaptive is not None else None
    for condition, conditioned in zip(cfg.campaign.conditions, conditioned_configs(cfg), strict=True):
        for seed in cfg.campaign.seeds:
            name = run_name(condition.label, seed)
            config = _finish(conditioned, name, condition.label, seed, cfg.campaign.max_steps, run_dir, rungs)
            runs.append(RunSpec(name, condition.label, seed, dict(condition.overrides), config))
    return runs
