"""What the pool measured at each capacity it has held: the recent (N, X) rounds per capacity level.

The pooled controller fits USL to one point per level (the mean N and mean X of that level's last
`keep` fitted rounds), not to a window of rounds. A window of rounds fills with points at the one
capacity the controller settles on, so the few points at other capacities that identify kappa are
outvoted by noise at a single N; per-level means weigh every measured capacity equally and average
the noise of each. The table also answers the questions the controller asks of measurements alone:
which level was best, and how far below the best a level is.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from retrain_ray.backpressure.fit import USLFit, fit_points


class CapacityLevels:
    """Recent fitted rounds, (items in flight N, campaign throughput X), per capacity."""

    def __init__(self, keep: int = 8) -> None:
        if int(keep) < 1:
            raise ValueError(f"pooled rounds kept per capacity must be >= 1, got {keep!r}")
        self.keep = int(keep)
        self.levels: dict[int, deque[tuple[float, float]]] = {}
        self.rounds = 0  # fitted rounds ever added

    def add(self, capacity: int, n_items: float, x: float) -> None:
        level = self.levels.setdefault(int(capacity), deque(maxlen=self.keep))
        level.append((float(n_items), float(x)))
        self.rounds += 1

    def __contains__(self, capacity: int) -> bool:
        return capacity in self.levels

    def __len__(self) -> int:
        return len(self.levels)

    def count(self, capacity: int) -> int:
        """Rounds kept for `capacity` (0 if never measured)."""
        return len(self.levels.get(capacity, ()))

    def mean_x(self, capacity: int) -> float:
        pts = self.levels[capacity]
        return sum(x for _, x in pts) / len(pts)

    def mean_n(self, capacity: int) -> float:
        pts = self.levels[capacity]
        return sum(n for n, _ in pts) / len(pts)

    def best(self) -> int | None:
        """The capacity with the highest mean throughput (the lowest such capacity on ties)."""
        if not self.levels:
            return None
        return max(sorted(self.levels), key=self.mean_x)

    def top(self) -> int | None:
        return max(self.levels) if self.levels else None

    def within(self, capacity: int, drop: float) -> bool:
        """Measured, and its mean X at most `drop` (a fraction) below the best level's."""
        best = self.best()
        return capacity in self.levels and best is not None and \
            self.mean_x(capacity) >= (1.0 - drop) * self.mean_x(best)

    def items_per_slot(self) -> float:
        """Mean items in flight per granted slot, over the levels (0.0 before any round)."""
        if not self.levels:
            return 0.0
        return sum(self.mean_n(c) / c for c in self.levels) / len(self.levels)

    def fit(self) -> USLFit | None:
        """USL fit through the levels' mean points; None with fewer than 3 levels or a singular system."""
        if len(self.levels) < 3:
            return None
        return fit_points((self.mean_n(c), self.mean_x(c)) for c in self.levels)

    def state_dict(self) -> dict[str, Any]:
        return {"keep": self.keep, "rounds": self.rounds,
                "levels": {str(c): [list(pt) for pt in pts] for c, pts in self.levels.items()}}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> CapacityLevels:
        out = cls(int(d["keep"]))
        out.rounds = int(d["rounds"])
        for c, pts in d["levels"].items():
            out.levels[int(c)] = deque(((float(n), float(x)) for n, x in pts), maxlen=out.keep)
        return out
