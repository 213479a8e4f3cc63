"""Credit assignment for one step: groups -> token advantages -> a TrainBatch (spec 1.4, 1.5, 2.8).

Per group: reward-tie statistics, the uniform-group skip (kept when batch normalisation is on),
`compute_group_advantages` (episode mode, then token transform). Then, over the whole batch, the
REINFORCE++ normalisation and the advantage cap, in that order. Surprisal statistics are averaged over
groups, as the original logs them.

Which steps train (`Credit.batch` is not None):
  * without `batch_advantage_norm`: a step with at least one nonzero token advantage;
  * with `batch_advantage_norm`: every step that has datums. Its tied groups are "kept for batch norm"
    (spec 1.5), and the original trains on them even when every group tied: on a SmolLM2-135M config
    that earned no reward it logged a row with reward 0.0 for each such step (issue 26). The update then
    has no action token and a zero gradient, yet the optimizer still steps: AdamW's weight decay and the
    momentum of earlier steps move the weights, and its step count advances, as in the original.
A step that does not train is still logged, with `trained = false` (DESIGN.md decision 13).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from retrain_ray.algorithms import (
    PREV_ETA_PARAM,
    ResolvedModes,
    batch_normalize,
    cap_advantages,
    is_adaptive_delight,
    reward_tie_stats,
)
from retrain_ray.algorithms.api import group_advantages
from retrain_ray.algorithms.echo import EchoSettings, budget_masks, echo_budget, observation_span
from retrain_ray.algorithms.turns import (
    ema_update,
    outcome_advantages,
    tl_grpo_turn_advantages,
    turn_token_advantages,
)
from retrain_ray.algorithms.types import GroupAdvantages, param_table
from retrain_ray.backends.types import TrainBatch
from retrain_ray.run.plugin_modes import resolve_modes
from retrain_ray.run.rollout import Group

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import EchoSection
    from retrain_ray.config.sections_training import (
        AlgorithmSection,
        GtpoSection,
        HicraSection,
        TrainingSection,
    )

SURPRISAL_STAT_KEYS = (
    "exec_surprisal_mean",
    "exec_surprisal_var",
    "plan_surprisal_mean",
    "plan_surprisal_var",
    "post_exec_surprisal_mean",
    "post_exec_surprisal_var",
    "post_plan_surprisal_mean",
    "post_plan_surprisal_var",
)


class CreditSections(Protocol):
    """The sections of a config that `CreditSettings.from_config` reads."""

    @property
    def algorithm(self) -> AlgorithmSection: ...
    @property
    def gtpo(self) -> GtpoSection: ...
    @property
    def hicra(self) -> HicraSection: ...
    @property
    def training(self) -> TrainingSection: ...
    @property
    def echo(self) -> EchoSection: ...


@dataclass(frozen=True)
class CreditSettings:
    """The algorithm choices of one run (from `[algorithm]`, `[gtpo]`, `[hicra]`, `[training]`), with their
    modes resolved once, when the settings are made (`modes`; a plugin mode is imported then)."""

    advantage_mode: str
    transform_mode: str
    algorithm_mode: str = ""
    uncertainty_kind: str = "surprisal"
    transform_params: dict[str, object] = field(default_factory=dict)
    advantage_params: dict[str, object] = field(default_factory=dict)
    algorithm_params: dict[str, object] = field(default_factory=dict)
    gtpo_beta: float = 0.1
    hicra_alpha: float = 0.2
    batch_advantage_norm: bool = False
    adv_clip_max: float = 0.0
    tl_grpo: bool = False
    tl_grpo_ema_decay: float = 0.9
    tl_grpo_baseline: float | None = None  # the run's EMA of episode rewards before this step (TL-GRPO)
    echo: EchoSettings | None = None  # `[echo]` when enabled
    resolved: ResolvedModes | None = field(default=None, repr=False, compare=False)  # set by __post_init__

    def __post_init__(self) -> None:
        if self.resolved is None:
            object.__setattr__(self, "resolved", resolve_modes(self.advantage_mode, self.transform_mode,
                                                               self.algorithm_mode, self.uncertainty_kind,
                                                               self.transform_params))

    @property
    def modes(self) -> ResolvedModes:
        """The resolved advantage, transform, uncertainty and algorithm specs."""
        assert self.resolved is not None  # __post_init__ resolves them
        return self.resolved

    @classmethod
    def from_config(cls, cfg: CreditSections) -> CreditSettings:
        alg = cfg.algorithm
        params = dict(alg.transform_params)
        # The original has one field for the two spellings; a transform_params entry wins.
        if alg.surprisal_mask_rho:
            params.setdefault("surprisal_mask_rho", alg.surprisal_mask_rho)
        if alg.entropy_mask_rho:
            params.setdefault("entropy_mask_rho", alg.entropy_mask_rho)
        return cls(
            advantage_mode=alg.advantage_mode,
            transform_mode=alg.transform_mode,
            algorithm_mode=alg.algorithm_mode,
            uncertainty_kind=alg.uncertainty_kind,
            transform_params=params,
            advantage_params=dict(alg.advantage_params),
            algorithm_params=dict(alg.params),
            gtpo_beta=cfg.gtpo.beta,
            hicra_alpha=cfg.hicra.alpha,
            batch_advantage_norm=cfg.training.batch_advantage_norm,
            adv_clip_max=cfg.training.adv_clip_max,
            tl_grpo=cfg.training.tl_grpo,
            tl_grpo_ema_decay=cfg.training.tl_grpo_ema_decay,
            echo=_echo_settings(cfg.echo),
        )

    def for_step(self, delight_eta_prev: float | None, tl_grpo_ema: float | None = None) -> CreditSettings:
        """These settings with the run's delight eta state handed to an adaptive eta (as the original:
        only once a previous step logged one, and only where `delight_eta_mode` is adaptive), and
        TL-GRPO's EMA baseline."""
        if tl_grpo_ema is not None:
            return replace(self, tl_grpo_baseline=tl_grpo_ema).for_step(delight_eta_prev)
        if delight_eta_prev is None:
            return self
        nested = dict(param_table(self.algorithm_params.get("transform_params") or self.transform_params))
        return replace(
            self,
            transform_params=_with_prev_eta(self.transform_params, delight_eta_prev),
            algorithm_params={**self.algorithm_params, "transform_params": _with_prev_eta(nested, delight_eta_prev)},
        )


def _echo_settings(e: EchoSection) -> EchoSettings | None:
    if not e.enabled:
        return None
    return EchoSettings(weight=e.weight, target_retention=e.target_retention, max_tokens_per_step=e.max_tokens_per_step,
                        max_token_ratio=e.max_token_ratio, entropy_floor=e.entropy_floor,
                        min_prompt_overlap=e.min_prompt_overlap,
                        require_live_observation_bridge=e.require_live_observation_bridge)


def _with_prev_eta(params: dict[str, object], eta: float) -> dict[str, object]:
    return {**params, PREV_ETA_PARAM: eta} if is_adaptive_delight(params) else params


@dataclass
class Credit:
    """Result of credit assignment: the batch to train on (None: the step trains nothing, `trains`)."""

    batch: TrainBatch | None
    metrics: dict[str, float]


def _group_advantages(group: Group, settings: CreditSettings, sepa_lambda: float) -> GroupAdvantages:
    entropies = None
    if group.samples_G and group.samples_G[0].entropies is not None:
        entropies = [list(s.entropies or ()) for s in group.samples_G]
    return group_advantages(settings, group.rewards_G, [list(s.logprobs) for s in group.samples_G],
                            group.planning_masks_G, sepa_lambda=sepa_lambda, entropies=entropies)


def _mean_of(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def assign_credit(groups: list[Group], settings: CreditSettings, sepa_lambda: float, temperature: float) -> Credit:
    ties = reward_tie_stats([g.rewards_G for g in groups])
    metrics: dict[str, float] = dict(ties.metrics)
    tokens_D: list[list[int]] = []
    logprobs_D: list[list[float]] = []
    advantages_D: list[list[float]] = []
    prompt_lens_D: list[int] = []
    echo_D: list[list[float]] = []
    stats_rows: list[dict[str, float]] = []
    extras: dict[str, list[float]] = {}
    turn_advantages_G = _turn_advantages(groups, settings, metrics)
    for group, uniform, turn_advs in zip(groups, ties.uniform_G, turn_advantages_G, strict=True):
        # kept: for batch norm (zero advantages), TL-GRPO (its turns differ) and ECHO (observation targets)
        if uniform and not settings.batch_advantage_norm and not settings.tl_grpo and settings.echo is None:
            continue
        result = _group_advantages(group, settings, sepa_lambda)
        stats_rows.append(result.stats.as_metrics())
        for key, value in result.extra_metrics.items():
            extras.setdefault(key, []).append(float(value))
        if group.episodes_G is not None:
            for tokens, logprobs, advs, n_prompt, echo in _turn_datums(group, result.token_advantages, turn_advs,
                                                                        settings.echo):
                tokens_D.append(tokens)
                logprobs_D.append(logprobs)
                advantages_D.append(advs)
                prompt_lens_D.append(n_prompt)
                echo_D.append(echo)
            continue
        for sample, token_advs in zip(group.samples_G, result.token_advantages, strict=True):
            n_prompt = len(group.prompt_ids)
            tokens_D.append(list(group.prompt_ids) + list(sample.token_ids))
            logprobs_D.append([0.0] * n_prompt + list(sample.logprobs))
            advantages_D.append([0.0] * n_prompt + [float(a) for a in token_advs])
            prompt_lens_D.append(n_prompt)
            echo_D.append([0.0] * len(tokens_D[-1]))
    for key in SURPRISAL_STAT_KEYS:
        metrics[key] = _mean_of([row.get(key, 0.0) for row in stats_rows])
    for legacy, source in (("exec_entropy_mean", "exec_surprisal_mean"), ("exec_entropy_var", "exec_surprisal_var"),
                           ("plan_entropy_mean", "plan_surprisal_mean"), ("plan_entropy_var", "plan_surprisal_var")):
        metrics[legacy] = metrics[source]
    metrics.update({k: _mean_of(v) for k, v in extras.items()})
    metrics["rl/pre_optimizer_nonzero_advantage_action_tokens"] = float(_count_nonzero(advantages_D))
    advantages_D = _batch_transforms(advantages_D, settings, metrics)
    nonzero = _count_nonzero(advantages_D)
    metrics["rl/optimizer_nonzero_advantage_action_tokens"] = float(nonzero)
    metrics["rl/nonzero_advantage_action_tokens"] = float(nonzero)
    metrics["num_datums"] = float(len(tokens_D))
    metrics.update(_action_token_metrics(groups, logprobs_D, prompt_lens_D))
    echo_mask_D = None
    if settings.echo is not None:
        echo_mask_D = budget_masks(echo_D, echo_budget(settings.echo, nonzero))
        metrics["echo/observation_tokens"] = float(_count_nonzero(echo_D))
    echo_targets = _count_nonzero(echo_mask_D) if echo_mask_D is not None else 0
    if not trains(num_datums=len(tokens_D), nonzero_tokens=nonzero + echo_targets, settings=settings):
        metrics["tokens_per_step"] = 0.0
        return Credit(batch=None, metrics=metrics)
    batch = TrainBatch(tokens_D, logprobs_D, advantages_D, prompt_lens_D, temperature=temperature,
                       echo_mask_D=echo_mask_D, echo_weight=settings.echo.weight if settings.echo else 0.0,
                       echo_entropy_floor=settings.echo.entropy_floor if settings.echo else 0.0)
    metrics["tokens_per_step"] = float(batch.num_tokens)
    return Credit(batch=batch, metrics=metrics)


def _turn_advantages(groups: list[Group], settings: CreditSettings, metrics: dict[str, float]) -> list[list[list[float]]]:
    """Per group, per episode: the per-turn advantages that replace the episode-level ones (empty:
    none). TL-GRPO's come from the branch rewards and the EMA baseline, which each group updates in
    turn (the next group's baseline has seen this group's rewards, as in the original); otherwise the
    environment's own (MT-GRPO)."""
    ema = settings.tl_grpo_baseline
    out: list[list[list[float]]] = []
    for group in groups:
        episodes = group.episodes_G or []
        if settings.tl_grpo and ema is not None:
            outcomes = outcome_advantages(group.rewards_G, ema)
            out.append([tl_grpo_turn_advantages(e.branch_rewards, o) for e, o in zip(episodes, outcomes, strict=False)])
            ema = ema_update(ema, group.rewards_G, settings.tl_grpo_ema_decay)
        else:
            out.append([list(e.turn_advantages) for e in episodes])
    if settings.tl_grpo and ema is not None:
        metrics["tl_grpo_ema"] = ema
    return out


def _turn_datums(
    group: Group, token_advantages: list[list[float]], turn_advantages: list[list[float]], echo: EchoSettings | None
) -> Iterator[tuple[list[int], list[float], list[float], int, list[float]]]:
    """One datum per turn of each finished episode (a truncated one has none): the turn's prompt and
    completion, its advantages from `turn_token_advantages`, and its ECHO targets (the observation in its
    prompt; zeros without ECHO)."""
    for episode, token_advs, turn_advs in zip(group.episodes_G or [], token_advantages, turn_advantages, strict=True):
        if episode.truncated:
            continue
        per_turn = turn_token_advantages(episode.turn_lengths, token_advs, turn_advs)
        previous: list[int] = []
        for turn, advs in zip(episode.turns, per_turn, strict=True):
            n_prompt = len(turn.prompt_ids)
            tokens = list(turn.prompt_ids) + list(turn.sample.token_ids)
            mask = [0.0] * len(tokens)
            if echo is not None and previous:
                span = observation_span(previous, turn.prompt_ids, echo.min_prompt_overlap)
                if span is None and echo.require_live_observation_bridge:
                    raise ValueError("echo.require_live_observation_bridge: a turn's prompt does not continue the "
                                     f"previous turn's prompt and completion (less than min_prompt_overlap = "
                                     f"{echo.min_prompt_overlap} shared), so its observation cannot be found; "
                                     "set require_live_observation_bridge = false or lower min_prompt_overlap")
                for p in range(*(span or (0, 0))):
                    mask[p] = 1.0
            previous = tokens
            yield (tokens, [0.0] * n_prompt + list(turn.sample.logprobs), [0.0] * n_prompt + advs, n_prompt, mask)


def trains(*, num_datums: int, nonzero_tokens: int, settings: CreditSettings) -> bool:
    """Whether a step with these datums is trained (see the module docstring)."""
    if num_datums == 0:
        return False
    return nonzero_tokens > 0 or settings.batch_advantage_norm


def _action_token_metrics(groups: list[Group], logprobs_D: list[list[float]], prompt_lens_D: list[int]) -> dict[str, float]:
    """Sampled vs datumized completion tokens (skipped groups sample but train nothing) and the mean
    surprisal of the datumized ones (spec 8)."""
    sampled = sum(len(s.token_ids) for g in groups for s in g.samples_G)
    completion_lps = [lp for row, n in zip(logprobs_D, prompt_lens_D, strict=True) for lp in row[n:]]
    eligible = len(completion_lps)
    return {
        "rl/sampled_action_tokens": float(sampled),
        "rl/eligible_action_tokens": float(eligible),
        "rl/action_token_datumization_ratio": eligible / sampled if sampled else 0.0,
        "rl/completion_surprisal_mean": -sum(completion_lps) / eligible if eligible else 0.0,
    }


def logical_batch_sha256(batch: TrainBatch) -> str:
    """Fingerprint of what the optimizer is given: tokens, logprobs, advantages and prompt lengths."""
    digest = hashlib.sha256()
    for row in (batch.tokens_D, batch.logprobs_D, batch.advantages_D, [batch.prompt_lens_D]):
        digest.update(json.dumps(row, separators=(",", ":")).encode())
    return digest.hexdigest()


def _batch_transforms(advantages_D: list[list[float]], settings: CreditSettings, metrics: dict[str, float]) -> list[list[float]]:
    if settings.batch_advantage_norm:
        advantages_D, norm_metrics = batch_normalize(advantages_D)
        metrics.update(norm_metrics)
    if settings.adv_clip_max > 0:
        advantages_D, cap_metrics = cap_advantages(advantages_D, settings.adv_clip_max)
        metrics.update(cap_metrics)
    else:
        metrics.update({"adv_cap_fraction": 0.0, "adv_cap_magnitude": 0.0})
    return advantages_D


def _count_nonzero(advantages_D: list[list[float]]) -> int:
    return sum(1 for row in advantages_D for a in row if a != 0.0)
