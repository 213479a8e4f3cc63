"""Configs that are valid but train nothing by RL, said up front (issue 34, "no silent no-ops").

* every step a warm-start step: `sft_warmup_steps >= max_steps` (a campaign's `[campaign] max_steps`
  replaces the run's) leaves no RL step, so the reward and correct-rate columns stay empty;
* `group_size = 1`: each group is one completion, its group-relative advantage is 0, so no step has a
  signal to train on (every row says `trained = false`).

The same text is logged when a run starts (run/loop.py), and a run's end summary counts the steps that
trained nothing (results/untrained.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrain_ray.config.campaign_schema import CampaignSection
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_training import TrainingSection

_RL_TRAINERS = ("retrain", "ttt_discover")  # the runners that train on group-relative advantages


def effective_max_steps(t: TrainingSection, campaign: CampaignSection | None) -> int:
    """The steps each run takes: `[campaign] max_steps` replaces `[training] max_steps` in a campaign."""
    return campaign.max_steps if campaign is not None else t.max_steps


def all_warm_start_warning(t: TrainingSection, campaign: CampaignSection | None) -> str | None:
    max_steps = effective_max_steps(t, campaign)
    if t.trainer != "retrain" or t.sft_warmup_steps < max_steps:
        return None
    source = "[campaign] max_steps" if campaign is not None else "training.max_steps"
    unless = (f" unless the correct rate reaches sft_target_correct_rate = {t.sft_target_correct_rate} first"
              if t.sft_target_correct_rate > 0 else "")
    return (f"training.sft_warmup_steps = {t.sft_warmup_steps} covers all {max_steps} steps ({source}): every "
            f"step is a warm-start (SFT) step and no RL step runs{unless}, so reward and correct_rate stay empty; "
            'raise max_steps above sft_warmup_steps, or use trainer = "sft" for a supervised run')


def single_completion_warning(t: TrainingSection) -> str | None:
    if t.trainer not in _RL_TRAINERS or t.group_size != 1:
        return None
    return ("training.group_size = 1: each group has one completion, so every group-relative advantage is 0 "
            "and no RL step trains (rows say trained = false); use group_size >= 2")


def no_training_warnings(cfg: RetrainConfig) -> list[str]:
    """What makes a valid config train nothing by RL (empty when it trains)."""
    found = (all_warm_start_warning(cfg.training, cfg.campaign), single_completion_warning(cfg.training))
    return [w for w in found if w is not None]


def condition_warnings(runs: Iterable[tuple[str, RetrainConfig]]) -> list[str]:
    """`no_training_warnings` of a campaign's runs, once per condition (`(condition, run config)` pairs;
    seeds do not change these keys), or once for all when every condition has it."""
    by_condition: dict[str, list[str]] = {}
    for condition, cfg in runs:
        by_condition.setdefault(condition, no_training_warnings(cfg))
    texts = dict.fromkeys(w for found in by_condition.values() for w in found)
    return [f"every condition: {w}" if all(w in found for found in by_condition.values())
            else f"condition {', '.join(c for c, found in by_condition.items() if w in found)}: {w}"
            for w in texts]
