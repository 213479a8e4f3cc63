"""What a multi-turn rollout records per episode: its turns (each a datum) and the turn-level signals
the credit step reads (the environment's per-turn advantages, TL-GRPO's branch rewards)."""

from __future__ import annotations

from dataclasses import dataclass

from retrain_ray.algorithms.turns import TurnAction
from retrain_ray.engines.types import SampleResult


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
