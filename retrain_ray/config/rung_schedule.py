"""The default rung schedule of an adaptive campaign (`[campaign.adaptive] rungs` left out): a rung at
every `rung_every` of `[campaign].max_steps`, the last at `max_steps`, and rungs at least `window` steps
apart (campaign_schema.py: a run resumed after a pause at a rung starts its metric window anew).

Why early and often (docs/campaigns.md, "Sequential decisions"): a condition stopped at the first rung
saves the most, so the first rung comes early; the group-sequential test loses little alpha to many
correlated looks, where the Bonferroni split divides alpha by every one of them. On the seeded
simulation suite a rung at every 4% is where the sequential test spends at most 80% of the Bonferroni
split's seed-steps on every clearly-worse scenario (benchmarks/adaptive_tests.py).
"""

from __future__ import annotations

import math

DEFAULT_RUNG_EVERY = 0.04
"""The default spacing of the rungs, as a fraction of max_steps: 25 rungs."""


def even_rungs(max_steps: int, every: float = DEFAULT_RUNG_EVERY) -> list[int]:
    """A rung at each multiple of `every * max_steps` (rounded down to a step, at least step 1) below
    `max_steps`, and one at `max_steps`; steps that rounding makes equal count once."""
    if max_steps <= 0:
        raise ValueError(f"max_steps={max_steps}: expected a positive number of steps")
    if not 0.0 < every <= 1.0:
        raise ValueError(f"rung_every={every}: expected a fraction of max_steps in (0, 1]")
    count = math.ceil(1.0 / every - 1e-9)
    steps = {max(1, math.floor(max_steps * k * every + 1e-9)) for k in range(1, count)}
    return sorted(steps | {max_steps})
