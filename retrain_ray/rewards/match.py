"""`match` reward (the original's default `BoxedMathReward`).

1.0 when the content of the last `\\boxed{}` of the completion equals the reference exactly after
stripping whitespace, else 0.0. No normalisation: "0.5" and "1/2" differ (use `math` for that).
"""

from __future__ import annotations

from retrain_ray.rewards.boxed import extract_boxed
from retrain_ray.rewards.types import check_batch


class MatchReward:
    """Exact string match of the last boxed answer against the reference."""

    name = "match"

    def score(self, completion: str, reference: str) -> float:
        return 1.0 if extract_boxed(completion).strip() == reference.strip() else 0.0

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        check_batch(completions, references)
        return [self.score(c, r) for c, r in zip(completions, references, strict=True)]
