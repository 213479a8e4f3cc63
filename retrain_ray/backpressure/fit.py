"""The Universal Scalability Law and its sliding-window least-squares fit (Gunther 2008).

    C(p) = p / (1 + sigma*(p-1) + kappa*p*(p-1))   (0 if the denominator is <= 0),   X(p) = lambda*C(p)
    p*   = sqrt((1-sigma)/kappa)                  (1.0 if kappa <= 0 or 1-sigma <= 0)

The fit linearises X(p) as y = p/X = A + B*p + C*p^2 with A = (1-sigma)/lambda, B = (sigma-kappa)/lambda,
C = kappa/lambda, so A+B+C = 1/lambda, sigma = (B+C)/(A+B+C), kappa = C/(A+B+C). It keeps the eight
sums of the normal equations (n, Σp, Σp², Σp³, Σp⁴, Σy, Σpy, Σp²y) over the valid observations
(X >= eps) of a sliding window of `window` observations, adds each new one and subtracts the evicted
one (O(1) per observation), and solves the 3x3 system by Cramer's rule when n >= 3. sigma is clipped
to [0, 1] and kappa to >= 0. This is the original's fit (spec 4.1); the window is also serialisable
here, which the original's was not.

`CapacityLevels` is what the pooled controller fits: the recent (N, X) rounds per capacity level, one
point per level (the mean N and mean X of that level's last `keep` rounds), not a window of rounds. A
window fills with points at the one capacity the controller settles on, so the few points at other
capacities that identify kappa are outvoted by noise at a single N; per-level means weigh every measured
capacity equally. It also answers which level was best, and how far below the best a level is.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

EPS = 1e-8


def usl_capacity(p: float, sigma: float, kappa: float) -> float:
    """Relative capacity C(p): X(p) / lambda. 0 where the USL denominator is not positive."""
    denom = 1.0 + sigma * (p - 1.0) + kappa * p * (p - 1.0)
    if denom <= 0.0:
        return 0.0
    return p / denom


def usl_optimal_p(sigma: float, kappa: float) -> float:
    """Concurrency of peak throughput, sqrt((1-sigma)/kappa); 1.0 without a retrograde term."""
    if kappa <= 0.0 or 1.0 - sigma <= 0.0:
        return 1.0
    return math.sqrt((1.0 - sigma) / kappa)


@dataclass(frozen=True)
class USLFit:
    """Fitted parameters. `lam` is the single-unit throughput lambda."""

    sigma: float
    kappa: float
    lam: float
    p_star: float


def _terms(p: float, x: float) -> tuple[float, ...]:
    y = p / x
    return (1.0, p, p * p, p**3, p**4, y, p * y, p * p * y)


def _det3(m: list[list[float]]) -> float:
    return (
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    )


def solve_sums(sums: list[float]) -> USLFit | None:
    """Cramer's rule on the normal equations; None when there are < 3 points or the system is singular."""
    s0, s1, s2, s3, s4, sy, spy, sp2y = sums
    if s0 < 3:
        return None
    m = [[s0, s1, s2], [s1, s2, s3], [s2, s3, s4]]
    det = _det3(m)
    if abs(det) < EPS:
        return None
    rhs = [sy, spy, sp2y]
    coef = []
    for col in range(3):
        mc = [[rhs[r] if c == col else m[r][c] for c in range(3)] for r in range(3)]
        coef.append(_det3(mc) / det)
    a, b, c = coef
    abc = a + b + c
    if not math.isfinite(abc) or abc < EPS:
        return None
    sigma = min(1.0, max(0.0, (b + c) / abc))
    kappa = max(0.0, c / abc)
    return USLFit(sigma=sigma, kappa=kappa, lam=1.0 / abc, p_star=usl_optimal_p(sigma, kappa))


def _sums(points: Iterable[tuple[float, float]]) -> list[float]:
    out = [0.0] * 8
    for p, x in points:
        if x >= EPS:
            for i, t in enumerate(_terms(p, x)):
                out[i] += t
    return out


def fit_points(points: Iterable[tuple[float, float]]) -> USLFit | None:
    """The same least-squares fit over an explicit set of (p, X) points (X < eps skipped)."""
    return solve_sums(_sums(points))


class USLWindow:
    """Sliding window of (p, X) observations with the fit's incremental sums."""

    def __init__(self, window: int = 100) -> None:
        if int(window) < 3:
            raise ValueError(f"backpressure window must be >= 3 observations, got {window!r}")
        self.window = int(window)
        self.points: deque[tuple[float, float]] = deque()
        self.sums: list[float] = [0.0] * 8

    def add(self, p: float, x: float) -> None:
        """Append (p, X); evict (and subtract) the oldest when the window is full."""
        if len(self.points) == self.window:
            old_p, old_x = self.points.popleft()
            if old_x >= EPS:
                for i, t in enumerate(_terms(old_p, old_x)):
                    self.sums[i] -= t
        self.points.append((float(p), float(x)))
        if x >= EPS:
            for i, t in enumerate(_terms(p, x)):
                self.sums[i] += t

    def rescan(self) -> list[float]:
        """The sums recomputed from scratch over the window (for checks; O(window))."""
        return _sums(self.points)

    def fit(self) -> USLFit | None:
        return solve_sums(self.sums)

    @property
    def n_valid(self) -> float:
        return self.sums[0]

    def state_dict(self) -> dict[str, Any]:
        return {"window": self.window, "points": [list(pt) for pt in self.points], "sums": list(self.sums)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.window = int(d["window"])
        self.points = deque((float(p), float(x)) for p, x in d["points"])
        self.sums = [float(s) for s in d["sums"]]


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
