"""Episode-level (one scalar per completion) advantage modes (spec 2.2).

* `grpo`: A_i = r_i - mean(r). Like Dr. GRPO there is no division by the group's std.
* `reinforce_pp`: identical to `grpo` inside a group; the REINFORCE++ batch normalisation is a separate,
  trainer-side step (`batch.batch_normalize`, enabled by `[training].batch_advantage_norm`).
* `maxrl`: A_i = (r_i - m) / (m + eps) with m = mean(r), and all zeros when m <= eps (eps = 1e-6 unless
  `advantage_params.eps` is given): rarely solved prompts get large advantages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

MAXRL_EPS = 1e-6


def grpo(rewards_G: Sequence[float], params: Mapping[str, object] | None = None) -> list[float]:
    """Group-centred rewards."""
    if not rewards_G:
        return []
    mean = sum(rewards_G) / len(rewards_G)
    return [float(r) - mean for r in rewards_G]


def reinforce_pp(rewards_G: Sequence[float], params: Mapping[str, object] | None = None) -> list[float]:
    """REINFORCE++ at group level: the same as GRPO (its batch step lives in `batch.py`)."""
    return grpo(rewards_G, params)


def maxrl(rewards_G: Sequence[float], params: Mapping[str, object] | None = None) -> list[float]:
    """Centred rewards divided by the group mean; zeros for a group whose mean is <= eps."""
    if not rewards_G:
        return []
    eps = float(cast("float", (params or {}).get("eps", MAXRL_EPS)))
    mean = sum(rewards_G) / len(rewards_G)
    if mean <= eps:
        return [0.0] * len(rewards_G)
    return [(float(r) - mean) / (mean + eps) for r in rewards_G]
