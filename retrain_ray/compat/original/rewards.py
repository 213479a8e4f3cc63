"""`retrain.rewards` for plugins: the `RewardFunction` protocol and `extract_boxed` (spec section 9)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from retrain_ray.rewards.boxed import extract_boxed

__all__ = ["BoxedMathReward", "RewardFunction", "extract_boxed"]


@runtime_checkable
class RewardFunction(Protocol):
    """What a `[reward] type` plugin's factory returns."""

    def score(self, response: str, reference: str) -> float: ...


class BoxedMathReward:
    """The original's default reward: 1.0 when the last \\boxed{} answer equals the reference (stripped)."""

    def score(self, response: str, reference: str) -> float:
        return 1.0 if extract_boxed(response).strip() == reference.strip() else 0.0
