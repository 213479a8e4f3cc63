"""Which completions go into the generation log (spec 1.5).

Per prompt, the `samples_per_prompt` completions with the highest reward, ties going to the
earlier sample index; prompts are cut to 200 characters and completions to 500, as the original.
With `[logging] generation_top_surprisal_limit` = N > 0 each row also carries `top_surprisal_tokens`: the N
tokens of the completion with the highest surprisal (-logprob of the sampled token, rounded to 4 places),
highest first, ties to the earlier position, each as {pos, surprisal, token} with the tokenizer's own token
string (`convert_ids_to_tokens`), as the original's rows (which always kept 10).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from retrain_ray.logs.types import MetricsRow

PROMPT_PREVIEW_CHARS = 200
COMPLETION_PREVIEW_CHARS = 500


def top_indices_by_reward(rewards_G: Sequence[float], n: int) -> list[int]:
    """Indices of the `n` highest rewards, best first; equal rewards keep index order."""
    order = sorted(range(len(rewards_G)), key=lambda i: (-rewards_G[i], i))
    return order[: max(n, 0)]


TopSurprisal = Callable[[int, int], list[dict[str, object]]]
"""(prompt index, sample index) -> the sample's `top_surprisal_tokens` entries."""


def top_surprisal_tokens(logprobs_T: Sequence[float], tokens_T: Sequence[str], limit: int) -> list[dict[str, object]]:
    """The `limit` highest-surprisal tokens of one completion, highest first, equal ones by position."""
    n = min(len(logprobs_T), len(tokens_T))
    order = sorted(range(n), key=lambda t: (logprobs_T[t], t))  # lowest logprob = highest surprisal
    return [{"pos": t, "surprisal": round(-logprobs_T[t], 4), "token": tokens_T[t]} for t in order[: max(limit, 0)]]


def select_generation_samples(
    *,
    step: int,
    prompts_P: Sequence[str],
    completions_P_G: Sequence[Sequence[str]],
    rewards_P_G: Sequence[Sequence[float]],
    num_tokens_P_G: Sequence[Sequence[int]],
    samples_per_prompt: int,
    run: str = "",
    top_surprisal: TopSurprisal | None = None,
) -> list[MetricsRow]:
    """Rows for GENERATIONS_SCHEMA: the best `samples_per_prompt` completions of each prompt (with
    `top_surprisal_tokens` from `top_surprisal` when given)."""
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
                **({"top_surprisal_tokens": top_surprisal(p, g)} if top_surprisal is not None else {}),
            })
    return rows
