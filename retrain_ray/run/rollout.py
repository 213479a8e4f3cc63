"""Sample and score: prompts -> groups of completions with rewards (spec 1.5, single turn)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from retrain_ray.data.types import Example
from retrain_ray.engines.types import SampleResult, SamplingEngine, SamplingParams
from retrain_ray.finite import check_rewards

CORRECT_THRESHOLD = 0.5


@dataclass
class Group:
    """One prompt and its `group_size` completions."""

    example: Example
    prompt_ids: list[int]
    samples_G: list[SampleResult]
    texts_G: list[str]
    rewards_G: list[float]
    planning_masks_G: list[list[int]]


def sample_groups(
    engine: SamplingEngine,
    prompt_ids_P: list[list[int]],
    examples_P: Sequence[Example],
    group_size: int,
    params: SamplingParams,
) -> list[Group]:
    """Generates `group_size` completions per prompt in one engine call."""
    results_P_G = engine.generate(prompt_ids_P, group_size, params)
    return [
        Group(example=ex, prompt_ids=ids, samples_G=list(res_G), texts_G=[], rewards_G=[], planning_masks_G=[])
        for ex, ids, res_G in zip(examples_P, prompt_ids_P, results_P_G, strict=True)
    ]


def decode_groups(groups: list[Group], tokenizer, needs_planning: bool, detect_planning) -> None:
    """Fills texts (one batch_decode for the whole step) and planning masks."""
    flat = [s.token_ids for g in groups for s in g.samples_G]
    texts = tokenizer.batch_decode([list(t) for t in flat], skip_special_tokens=True)
    cursor = 0
    for g in groups:
        n = len(g.samples_G)
        g.texts_G = texts[cursor : cursor + n]
        cursor += n
        if needs_planning and detect_planning is not None:
            g.planning_masks_G = [
                list(detect_planning(tokenizer.convert_ids_to_tokens(list(s.token_ids)))) for s in g.samples_G
            ]
        else:
            g.planning_masks_G = [[0] * len(s.token_ids) for s in g.samples_G]


def score_groups(groups: list[Group], reward) -> None:
    """Scores every completion of the step in one batch call; a non-finite reward is an error."""
    completions = [t for g in groups for t in g.texts_G]
    references = [g.example.reference for g in groups for _ in g.texts_G]
    scores = [float(r) for r in reward.score_batch(completions, references)]
    check_rewards(scores, completions, getattr(reward, "label", None) or getattr(reward, "name", type(reward).__name__))
    cursor = 0
    for g in groups:
        n = len(g.texts_G)
        g.rewards_G = [float(r) for r in scores[cursor : cursor + n]]
        cursor += n


def rollout_metrics(groups: list[Group], max_tokens: int) -> dict[str, float]:
    rewards = [r for g in groups for r in g.rewards_G]
    samples = [s for g in groups for s in g.samples_G]
    n = max(len(rewards), 1)
    return {
        "mean_reward": sum(rewards) / n,
        "correct_rate": sum(r > CORRECT_THRESHOLD for r in rewards) / n,
        "correct_count": float(sum(r > CORRECT_THRESHOLD for r in rewards)),
        "num_completions": float(len(rewards)),
        "max_token_hit_rate": sum(len(s.token_ids) >= max_tokens for s in samples) / n,
        "rl/completion_tokens": float(sum(len(s.token_ids) for s in samples)),
    }


class EndpointCounters:
    """A remote sampler's retry counters (`openai_retries`, ...), cumulative for the row, and the
    retried endpoint errors (502, 504, timeouts) of the latest step, which back pressure cuts on."""

    def __init__(self) -> None:
        self.seen = 0.0

    def read(self, engine: object) -> dict[str, float]:
        counters = getattr(type(engine), "runtime_metrics", None)  # engines that have them, never a proxy's
        values = counters(engine) if callable(counters) else None
        if not isinstance(values, dict):
            return {}
        total = float(sum(v for k, v in values.items() if k.endswith("_retries")))
        errors, self.seen = max(0.0, total - self.seen), total
        return {**{k: float(v) for k, v in values.items()}, "endpoint_errors": errors}
