"""Small statistics for campaign summaries: 95% Student-t confidence intervals of a mean."""

from __future__ import annotations

import math

# Two-sided 95% Student t quantiles for 1..30 degrees of freedom; 1.96 beyond.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(dof: int) -> float:
    return _T95[dof - 1] if 1 <= dof <= len(_T95) else 1.96


def ci95_halfwidth(values: list[float]) -> float:
    """Half-width of the 95% confidence interval of the mean; NaN with fewer than two values."""
    n = len(values)
    if n < 2:
        return float("nan")
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return t95(n - 1) * std / math.sqrt(n)
