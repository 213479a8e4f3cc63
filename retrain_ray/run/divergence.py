"""Divergence watch: an update that blows the weights up is named, warned about, and may stop the run.

`lr = 1e6` once raised the largest weight of a run from 1.05 to 857,717; the run ended "completed"
without a word (issue 26). Every trained step's row carries what the backend measured of its update
(the local backend: `grad_norm` before clipping, `weight_norm` and `weight_max_abs` after the update,
`weight_norm_growth` = weight norm after / before it) and its `loss`. A row diverges when

  * one of `loss`, `grad_norm`, `weight_norm`, `weight_max_abs` is not finite; or
  * `weight_norm_growth > factor`: the weights grew `factor`-fold in one update (a healthy update
    changes the weight norm by well under 1%; an lr a million times too high grows it a million-fold
    at the first step); or
  * `grad_norm` or `weight_norm` exceeds `factor` times its baseline: the median of its values on the
    last `WINDOW` healthy updates of this process (at least `MIN_HISTORY` of them; zero gradient norms,
    from updates with no action token, are not counted). The median is a baseline one spike cannot move,
    and a diverging value never enters it, so a run stays "diverging" until its values come back down.

`factor` is `[training] divergence_factor` (default 100; 0 turns the growth tests off, non-finite values
are still caught). A backend that reports none of these metrics is watched on its loss alone. The
watch warns once per onset (the first diverging row after a healthy one), naming the step and values;
with `[training] stop_on_divergence = true` the run fails instead, after the row is logged. The
baseline is not checkpointed: a resumed run rebuilds it from its next updates.
Non-finite gradients are refused earlier by the backend itself (`retrain_ray.util.finite`): this watch adds
the finite blow-ups, and weights that became non-finite after a finite gradient.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from retrain_ray.util.finite import NonFiniteError

WINDOW = 20
MIN_HISTORY = 3
FINITE_CHECKED = ("loss", "grad_norm", "weight_norm", "weight_max_abs")
BASELINED = ("grad_norm", "weight_norm")
GROWTH = "weight_norm_growth"


class DivergenceError(NonFiniteError):
    """The training update diverged and `[training] stop_on_divergence` is on."""


@dataclass(frozen=True)
class Divergence:
    """A diverging row: its step, what diverged (one phrase each), and whether it is a new onset."""

    step: int
    reasons: tuple[str, ...]
    onset: bool

    def describe(self) -> str:
        return f"training diverged at step {self.step}: {'; '.join(self.reasons)}"


def _number(row: Mapping[str, object], key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class DivergenceWatch:
    """Sees each trained row (`observe`) and says whether it diverges; plain, synchronous, no I/O."""

    def __init__(self, factor: float) -> None:
        self.factor = float(factor)
        self.history: dict[str, deque[float]] = {key: deque(maxlen=WINDOW) for key in BASELINED}
        self.diverging = False

    def observe(self, row: Mapping[str, object]) -> Divergence | None:
        """The row's divergence (None: healthy, or a row without an update)."""
        if row.get("trained") is False:
            return None
        reasons = self._nonfinite(row) + self._growth(row)
        if not reasons:
            self._remember(row)
            self.diverging = False
            return None
        onset = not self.diverging
        self.diverging = True
        return Divergence(int(cast("int", row.get("step", -1))), tuple(reasons), onset)

    def _nonfinite(self, row: Mapping[str, object]) -> list[str]:
        values = {key: _number(row, key) for key in FINITE_CHECKED}
        return [f"{key} is {value}" for key, value in values.items() if value is not None and not math.isfinite(value)]

    def _growth(self, row: Mapping[str, object]) -> list[str]:
        if self.factor <= 0:
            return []
        reasons: list[str] = []
        growth = _number(row, GROWTH)
        if growth is not None and math.isfinite(growth) and growth > self.factor:
            reasons.append(f"the weight norm grew {growth:.3g}-fold in one update "
                           f"(to {_number(row, 'weight_norm') or float('nan'):.4g}; limit {self.factor:g}-fold)")
        for key in BASELINED:
            value, history = _number(row, key), self.history[key]
            if value is None or not math.isfinite(value) or len(history) < MIN_HISTORY:
                continue
            baseline = statistics.median(history)
            if value > self.factor * baseline:
                reasons.append(f"{key} = {value:.4g} is {value / baseline:.3g} times its median of the last "
                               f"{len(history)} updates ({baseline:.4g}; limit {self.factor:g} times)")
        if (largest := _number(row, "weight_max_abs")) is not None and reasons:
            reasons.append(f"largest weight |w| = {largest:.4g}")
        return reasons

    def _remember(self, row: Mapping[str, object]) -> None:
        for key in BASELINED:
            value = _number(row, key)
            if value is not None and value > 0:
                self.history[key].append(value)


def stop_message(found: Divergence, lr: float) -> str:
    """The error of a run stopped by `stop_on_divergence`: what diverged and the fix."""
    return (f"{found.describe()}. The run was stopped because [training] stop_on_divergence = true; the rows up "
            f"to this step are logged and the last checkpoint holds the weights before the blow-up. Fix: lower "
            f"[training] lr (now {lr:g}; try 10x lower), set [optimizer] grad_clip_norm (e.g. 1.0), or raise "
            "[training] divergence_factor if this growth is expected")
