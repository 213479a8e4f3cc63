"""The permutation machinery of the group-sequential test (campaign/adaptive/sequential.py), AdaStop's
way (Mathieu et al., TMLR 2024): relabel whole seed trajectories (every look at once), take the
statistic of each relabelling at every look, and set each look's boundary so that the share of
relabellings that cross *any* boundary up to that look is at most the alpha spent so far. Pure numpy.

The statistic of a look is the studentized range: the range of the condition means (the largest
difference of any pair) over the pooled within-condition spread (`range_of_means` is the raw range).
Row 0 of every relabelling set is the observed labelling, so a Monte Carlo set stays an exact test.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from functools import lru_cache
from itertools import combinations

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.float64]
Indices = NDArray[np.int64]


def arrangement_count(sizes: Sequence[int]) -> int:
    """How many distinct ways the seeds can be split into groups of `sizes` (a multinomial)."""
    count = math.factorial(sum(sizes))
    for size in sizes:
        count //= math.factorial(size)
    return count


def relabellings(sizes: Sequence[int], limit: int, seed: int = 0) -> Indices:
    """Rows of seed indices, one per relabelling: the first `sizes[0]` columns are group 0's seeds, and
    so on. Row 0 is the observed labelling. Every distinct split when there are at most `limit` of them
    (an exact test), otherwise the observed one and `limit - 1` seeded random ones. Read-only: the same
    arguments give the same rows, so they are made once (a campaign asks again at every look)."""
    return _relabellings(tuple(sizes), limit, seed)


@lru_cache(maxsize=256)
def _relabellings(sizes: tuple[int, ...], limit: int, seed: int) -> Indices:
    rows = _fresh_relabellings(sizes, limit, seed)
    rows.setflags(write=False)
    return rows


def _fresh_relabellings(sizes: Sequence[int], limit: int, seed: int) -> Indices:
    total = sum(sizes)
    if arrangement_count(sizes) <= limit:
        return np.array(list(_all_splits(list(range(total)), list(sizes))), dtype=np.int64)
    rng = np.random.default_rng(seed)
    rows = rng.permuted(np.tile(np.arange(total, dtype=np.int64), (limit, 1)), axis=1)
    rows[0] = np.arange(total, dtype=np.int64)
    return rows


def _all_splits(items: list[int], sizes: list[int]) -> Iterator[list[int]]:
    """Every split of `items` into consecutive groups of `sizes`, the given order first."""
    if not sizes:
        yield []
        return
    for group in combinations(items, sizes[0]):
        rest = [i for i in items if i not in group]
        for tail in _all_splits(rest, sizes[1:]):
            yield [*group, *tail]


def range_of_means(values: Floats, sizes: Sequence[int], rows: Indices) -> Floats:
    """`values[seed, look]` relabelled by each row: the range of the group means at each look,
    shape (rows, looks)."""
    starts = np.cumsum([0, *sizes[:-1]])
    relabelled = values[rows]                                        # (rows, seeds, looks)
    sums = np.add.reduceat(relabelled, starts, axis=1)               # (rows, groups, looks)
    means = sums / np.asarray(sizes, dtype=np.float64)[None, :, None]
    return means.max(axis=1) - means.min(axis=1)


def studentized_range(values: Floats, sizes: Sequence[int], rows: Indices) -> Floats:
    """`range_of_means` over the pooled within-condition standard deviation of each relabelling and look:
    relabellings that mix conditions inflate that spread, so a real gap stands out more than on the
    raw range. Every condition needs 2 seeds or more."""
    starts = np.cumsum([0, *sizes[:-1]])
    counts = np.asarray(sizes, dtype=np.float64)[None, :, None]
    relabelled = values[rows]
    means = np.add.reduceat(relabelled, starts, axis=1) / counts
    squares = np.add.reduceat(relabelled * relabelled, starts, axis=1) - counts * means * means
    pooled = np.sqrt(np.maximum(squares.sum(axis=1), 0.0) / (sum(sizes) - len(sizes)))
    spread = means.max(axis=1) - means.min(axis=1)
    return np.divide(spread, pooled, out=np.full_like(spread, np.inf), where=pooled > 0)


def boundaries(statistics: Floats, budgets: Sequence[float]) -> list[float]:
    """The boundary of each look (columns of `statistics`, one row per relabelling): look k's is the
    lowest value such that the share of rows above some look's boundary, up to look k, is at most
    `budgets[k]` (cumulative alpha, non-decreasing). A look whose budget allows no row gets +inf
    (nothing can cross it)."""
    rows = statistics.shape[0]
    crossed = np.zeros(rows, dtype=bool)
    out: list[float] = []
    for look, budget in enumerate(budgets):
        allowed = math.floor(budget * rows + 1e-9) - int(crossed.sum())
        remaining = np.sort(statistics[~crossed, look])[::-1]
        if allowed < 0 or remaining.size == 0:
            bound = math.inf
        elif allowed >= remaining.size:
            bound = -math.inf
        else:
            bound = float(remaining[allowed])
        out.append(bound)
        crossed |= statistics[:, look] > bound
    return out
