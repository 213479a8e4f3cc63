"""The plan of an adaptive campaign (`[campaign.adaptive]`): which seeds start, which may be added, where
conditions are compared, and what it may cost. Pure: no Ray, no Tune (the config rules and `explain` use it).

A run reports to the campaign only with its checkpoints (campaign/trial.py), so every rung is a step at
which each run checkpoints: a multiple of `[training] save_every`, or the last step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import JsonValue

if TYPE_CHECKING:
    from retrain_ray.config.campaign_schema import CampaignSection


@dataclass(frozen=True)
class AdaptivePlan:
    metric: str
    window: int
    mode: str
    min_seeds: int
    max_seeds: int
    rungs: tuple[int, ...]
    alpha: float
    budget_steps: int  # 0: no limit
    conditions: tuple[str, ...]
    start_seeds: tuple[int, ...]  # every condition starts with these
    spare_seeds: tuple[int, ...]  # added in this order, never more than max_seeds in all
    max_steps: int
    test: str = "bonferroni"  # "sequential": campaign/adaptive/sequential.py's group-sequential test

    @property
    def worst_case_steps(self) -> int:
        """Every condition gets max_seeds seeds and runs every step (capped by the budget)."""
        worst = len(self.conditions) * self.max_seeds * self.max_steps
        return min(worst, self.budget_steps) if self.budget_steps else worst

    @property
    def best_case_steps(self) -> int:
        """All but the leader stopped at the first rung, with min_seeds each."""
        others = len(self.conditions) - 1
        return self.min_seeds * (self.max_steps + others * self.rungs[0])

    @property
    def grid_steps(self) -> int:
        """The grid of the first seeds run to the end (what the campaign costs with adaptive off)."""
        return len(self.conditions) * self.min_seeds * self.max_steps

    def describe(self) -> list[str]:
        budget = f"{self.budget_steps} steps" if self.budget_steps else "none"
        direction = "higher" if self.mode == "max" else "lower"
        adds = (f"add from {list(self.spare_seeds)} where undecided at the last rung (at most {self.max_seeds} per "
                "condition)" if self.spare_seeds else "no seeds added (max_seeds = min_seeds)")
        return [
            f"adaptive: compare conditions on {self.metric} (mean of the last {self.window} steps, {direction} is "
            f"better) at steps {list(self.rungs)}; family-wise alpha {self.alpha:g} ({self.test} test)",
            f"seeds: start {list(self.start_seeds)} per condition; {adds}; budget {budget}",
            f"steps: best case {self.best_case_steps} (all but the leader stopped at step {self.rungs[0]}), worst case "
            f"{self.worst_case_steps} (every condition to {self.max_seeds} seeds, all steps); the grid of the first "
            f"seeds: {self.grid_steps}",
        ]

    def to_json(self) -> dict[str, JsonValue]:
        return {"metric": self.metric, "window": self.window, "mode": self.mode, "min_seeds": self.min_seeds,
                "max_seeds": self.max_seeds, "rungs": list(self.rungs), "alpha": self.alpha,
                "test": self.test, "budget_steps": self.budget_steps, "start_seeds": list(self.start_seeds),
                "spare_seeds": list(self.spare_seeds), "best_case_steps": self.best_case_steps,
                "worst_case_steps": self.worst_case_steps, "grid_steps": self.grid_steps}


def adaptive_plan(camp: CampaignSection | None) -> AdaptivePlan | None:
    """The adaptive plan of a validated campaign config's `[campaign]`; None when `[campaign.adaptive]` is absent."""
    ad = camp.adaptive if camp is not None else None
    if camp is None or ad is None:
        return None
    seeds = tuple(camp.seeds)
    return AdaptivePlan(
        metric=ad.metric, window=int(ad.window), mode=ad.mode, min_seeds=int(ad.min_seeds),
        max_seeds=int(ad.max_seeds), rungs=tuple(int(r) for r in ad.rungs), alpha=float(ad.alpha),
        budget_steps=int(ad.budget_steps), conditions=tuple(c.label for c in camp.conditions),
        start_seeds=seeds[: ad.min_seeds], spare_seeds=seeds[ad.min_seeds: ad.max_seeds], max_steps=int(camp.max_steps),
        test=ad.test,
    )


