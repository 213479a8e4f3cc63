"""Which completions go into the generation log (spec 1.5).

Per prompt, the `samples_per_prompt` completions with the highest reward, ties going to the
earlier sample index; prompts are cut to 200 characters and completions to 500, as the original.
"""

from __future__ import annotations

from collections.abc import Sequence

from retrain_ray.logs.types import MetricsRow

PROMPT_PREVIEW_CHARS = 200
COMPLETION_PREVIEW_CHARS = 500


def top_indices_by_reward(rewards_G: Sequence[float], n: int) -> list[int]:
    """Indices of the `n` highest rewards, best first; equal rewards keep index order."""
    order = sorted(range(len(rewards_G)), key=lambda i: (-rewards_G[i], i))
    return order[: max(n, 0)]


def select_generation_samples(
    *,
    step: int,
    prompts_P: Sequence[str],
    completions_P_G: Sequence[Sequence[str]],
    rewards_P_G: Sequence[Sequence[float]],
    num_tokens_P_G: Sequence[Sequence[int]],
    samples_per_prompt: int,
    run: str = "",
) -> list[MetricsRow]:
    """Rows for GENERATIONS_SCHEMA: the best `samples_per_prompt` completions of each prompt."""
    if not (len(prompts_P) == len(completions_P_G) == len(rewards_P_G) == len(num_tokens_P_G)):
        raise ValueError(
            "select_generation_samples: prompts, completions, rewards and num_tokens need one entry per prompt; "
            f"got {len(prompts_P)}, {len(completions_P_G)}, {len(rewards_P_G)}, {len(num_tokens_P_G)}"
        )
    rows: list[MetricsRow] = []
    for p, prompt in enumerate(prompts_P):
        for g in top_indices_by_reward(rewards_P_G[p], samples_per_prompt):
            rows.append({
                "run": run,
                "step": step,
                "prompt": prompt[:PROMPT_PREVIEW_CHARS],
                "completion": completions_P_G[p][g][:COMPLETION_PREVIEW_CHARS],
                "reward": float(rewards_P_G[p][g]),
                "num_tokens": int(num_tokens_P_G[p][g]),
            })
    return rows
