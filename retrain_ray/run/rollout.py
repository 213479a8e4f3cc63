"""Rollout: prompts -> frozen, scored groups of completions (spec 1.5, single turn), and what a multi-turn
rollout records per episode (the section at the end).

`rollout` is the one place a run samples, decodes and scores, in that order: every `Group` it returns
is complete (texts, rewards and planning masks filled); none is built empty and filled later.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

from retrain_ray.algorithms.turns import TurnAction
from retrain_ray.data.types import Example
from retrain_ray.engines.types import SampleResult, SamplingEngine, SamplingParams
from retrain_ray.rewards.types import Reward
from retrain_ray.util.finite import check_rewards

if TYPE_CHECKING:
    from retrain_ray.models import Tokenizer

CORRECT_THRESHOLD = 0.5

PlanningDetector = Callable[[list[str]], list[int]]


@dataclass(frozen=True)
class Group:
    """One prompt and its `group_size` completions, decoded and scored. A multi-turn group also keeps
    its episodes (`episodes_G`); its samples are then each episode's turns joined."""

    example: Example
    prompt_ids: list[int]
    samples_G: list[SampleResult]
    texts_G: list[str]
    rewards_G: list[float]
    planning_masks_G: list[list[int]]
    episodes_G: list[EpisodeRecord] | None = None


@dataclass(frozen=True)
class Rollout:
    """What `rollout` returns: the scored groups and how long sampling and decode + scoring took."""

    groups: list[Group]
    sample_time_s: float
    score_time_s: float

    @property
    def correct_count(self) -> int:
        return sum(r > CORRECT_THRESHOLD for g in self.groups for r in g.rewards_G)

    @property
    def num_completions(self) -> int:
        return sum(len(g.rewards_G) for g in self.groups)


def rollout(
    engine: SamplingEngine,
    examples_P: Sequence[Example],
    prompt_ids_P: list[list[int]],
    *,
    group_size: int,
    params: SamplingParams,
    tokenizer: Tokenizer,
    reward: Reward,
    detect_planning: PlanningDetector | None = None,
) -> Rollout:
    """Samples `group_size` completions per prompt (one engine call), decodes them (one batch_decode),
    marks planning tokens when `detect_planning` is given (all zeros otherwise) and scores them (one
    reward batch call; a non-finite reward is an error)."""
    start = time.perf_counter()
    results_P_G = [list(res_G) for res_G in engine.generate(prompt_ids_P, group_size, params)]
    sampled = time.perf_counter()
    texts_P_G = _decode(results_P_G, tokenizer)
    masks_P_G = [planning_masks(res_G, tokenizer, detect_planning) for res_G in results_P_G]
    rewards_P_G = _score(texts_P_G, examples_P, reward)
    groups = [
        Group(example=ex, prompt_ids=ids, samples_G=res_G, texts_G=texts_G, rewards_G=rewards_G,
              planning_masks_G=masks_G)
        for ex, ids, res_G, texts_G, rewards_G, masks_G in zip(
            examples_P, prompt_ids_P, results_P_G, texts_P_G, rewards_P_G, masks_P_G, strict=True)
    ]
    return Rollout(groups, sample_time_s=sampled - start, score_time_s=time.perf_counter() - sampled)


def _decode(results_P_G: list[list[SampleResult]], tokenizer: Tokenizer) -> list[list[str]]:
    flat = [list(s.token_ids) for res_G in results_P_G for s in res_G]
    return _split(tokenizer.batch_decode(flat, skip_special_tokens=True), results_P_G)


def planning_masks(
    samples_G: list[SampleResult], tokenizer: Tokenizer, detect_planning: PlanningDetector | None
) -> list[list[int]]:
    if detect_planning is None:
        return [[0] * len(s.token_ids) for s in samples_G]
    return [list(detect_planning(cast("list[str]", tokenizer.convert_ids_to_tokens(list(s.token_ids))))) for s in samples_G]


def _score(texts_P_G: list[list[str]], examples_P: Sequence[Example], reward: Reward) -> list[list[float]]:
    completions = [t for texts_G in texts_P_G for t in texts_G]
    references = [ex.reference for ex, texts_G in zip(examples_P, texts_P_G, strict=True) for _ in texts_G]
    scores = [float(r) for r in reward.score_batch(completions, references)]
    check_rewards(scores, completions, getattr(reward, "label", None) or getattr(reward, "name", type(reward).__name__))
    return _split(scores, texts_P_G)


_T = TypeVar("_T")


def _split(flat: list[_T], shape_P_G: Sequence[Sequence[object]]) -> list[list[_T]]:
    """`flat` cut into consecutive runs with the lengths of the rows of `shape_P_G`."""
    out: list[list[_T]] = []
    cursor = 0
    for row in shape_P_G:
        out.append(list(flat[cursor : cursor + len(row)]))
        cursor += len(row)
    return out


def rollout_metrics(groups: Sequence[Group], max_tokens: int) -> dict[str, float]:
    """The row's rollout columns: mean reward, correct rate, truncation rate, completion tokens."""
    rewards = [r for g in groups for r in g.rewards_G]
    samples = [s for g in groups for s in g.samples_G]
    n = max(len(rewards), 1)
    return {
        "mean_reward": sum(rewards) / n,
        "correct_rate": sum(r > CORRECT_THRESHOLD for r in rewards) / n,
        "max_token_hit_rate": sum(len(s.token_ids) >= max_tokens for s in samples) / n,
        "rl/completion_tokens": float(sum(len(s.token_ids) for s in samples)),
    }


def reward_counters(reward: object) -> dict[str, float]:
    """A reward's own cumulative counters (the judge's `judge_calls`, ...); none for most rewards."""
    counters = getattr(type(reward), "runtime_metrics", None)
    found: object = counters(reward) if callable(counters) else None
    if not isinstance(found, dict):
        return {}
    return {str(k): float(v) for k, v in cast("dict[str, float]", found).items()}


class EndpointCounters:
    """A remote sampler's retry counters (`openai_retries`, ...), cumulative for the row, and the
    retried endpoint errors (502, 504, timeouts) of the latest step, which back pressure cuts on."""

    def __init__(self) -> None:
        self.seen = 0.0

    def read(self, engine: object) -> dict[str, float]:
        counters = getattr(type(engine), "runtime_metrics", None)  # engines that have them, never a proxy's
        found: object = counters(engine) if callable(counters) else None
        if not isinstance(found, dict):
            return {}
        values = cast("dict[str, float]", found)
        total = float(sum(v for k, v in values.items() if k.endswith("_retries")))
        errors, self.seen = max(0.0, total - self.seen), total
        return {**{k: float(v) for k, v in values.items()}, "endpoint_errors": errors}


def engine_labels(engine: object) -> dict[str, str]:
    """An engine's text facts about the latest step (a shared engine's `sampled_adapter`); none for most."""
    labels = getattr(type(engine), "runtime_labels", None)
    found: object = labels(engine) if callable(labels) else None
    if not isinstance(found, dict):
        return {}
    return {str(k): str(v) for k, v in cast("dict[str, object]", found).items()}


# ----------------------------------------------------------------------------------------------------
# What a multi-turn rollout records per episode: its turns (each a datum) and the turn-level signals
# the credit step reads (the environment's per-turn advantages, TL-GRPO's branch rewards).
@dataclass(frozen=True)
class TurnRecord:
    """One turn: the prompt it was sampled for, the completion, and what the environment made of it."""

    prompt_ids: list[int]
    sample: SampleResult
    text: str
    action: TurnAction


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished (or truncated) episode. `turn_advantages` are the environment's (MT-GRPO; empty:
    none); `branch_rewards[t]` the rewards of turn t's action and its alternatives (TL-GRPO; empty: off)."""

    turns: list[TurnRecord]
    reward: float
    truncated: bool
    turn_advantages: list[float]
    branch_rewards: list[list[float]]

    @property
    def turn_lengths(self) -> list[int]:
        return [len(t.sample.token_ids) for t in self.turns]


def joined_sample(turns: list[TurnRecord]) -> SampleResult:
    """The episode's completion tokens as one sequence (the episode-level advantage modes see this)."""
    samples = [t.sample for t in turns]
    entropies: tuple[float, ...] | None = None
    if samples and all(s.entropies is not None for s in samples):
        entropies = tuple(e for s in samples for e in (s.entropies or ()))
    return SampleResult(
        token_ids=tuple(i for s in samples for i in s.token_ids),
        logprobs=tuple(lp for s in samples for lp in s.logprobs),
        finish_reason=samples[-1].finish_reason if samples else "length",
        entropies=entropies,
    )
