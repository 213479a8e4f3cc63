"""SEPA lambda scheduler (spec 2.11): how strongly execution-token uncertainty is pooled at each step.

* linear: lambda(step) = clip((step - delay) / steps, 0, 1), and 0 when steps <= 0.
* auto: lambda = 1 - min(var_ema / var_0 / threshold, 1), where var_ema is an EMA of the per-sequence
  variance of execution-token surprisal and var_0 its value after `warmup` sequences (not steps);
  the schedule is max(auto, linear).
* A correct-rate gate holds lambda at 0 until one step's correct rate reaches `correct_rate_gate`; it
  then stays open (sticky).
`state_dict()` holds the settings and the state; `load_state_dict` restores only the state.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from typing import cast

SCHEDULES = ("linear", "auto")
_MAX_VALUE = math.sqrt(sys.float_info.max)


class SEPAController:
    """Plain, synchronous SEPA scheduler; see the module docstring."""

    def __init__(
        self,
        sepa_steps: int = 0,
        sepa_schedule: str = "linear",
        sepa_delay_steps: int = 0,
        sepa_correct_rate_gate: float = 0.0,
        sepa_ema_decay: float = 0.99,
        sepa_var_threshold: float = 0.2,
        sepa_warmup: int = 50,
        eps: float = 1e-8,
    ) -> None:
        checks = [
            (sepa_steps >= 0, f"sepa.steps must be >= 0 (got {sepa_steps})"),
            (sepa_delay_steps >= 0, f"sepa.delay_steps must be >= 0 (got {sepa_delay_steps})"),
            (0.0 <= sepa_correct_rate_gate <= 1.0, f"sepa.correct_rate_gate must be in [0, 1] (got {sepa_correct_rate_gate})"),
            (0.0 <= sepa_ema_decay <= 1.0, f"sepa_ema_decay must be in [0, 1] (got {sepa_ema_decay})"),
            (sepa_var_threshold > 0, f"sepa_var_threshold must be > 0 (got {sepa_var_threshold})"),
            (sepa_warmup >= 1, f"sepa_warmup must be >= 1 (got {sepa_warmup})"),
            (eps > 0, f"eps must be > 0 (got {eps})"),
            (sepa_schedule in SCHEDULES, f"sepa.schedule must be one of {SCHEDULES} (got {sepa_schedule!r})"),
        ]
        errors = [msg for ok, msg in checks if not ok]
        if errors:
            raise ValueError("SEPAController: " + "; ".join(errors))
        self.sepa_steps = int(sepa_steps)
        self.sepa_schedule = sepa_schedule
        self.sepa_delay_steps = int(sepa_delay_steps)
        self.sepa_correct_rate_gate = float(sepa_correct_rate_gate)
        self.sepa_ema_decay = float(sepa_ema_decay)
        self.sepa_var_threshold = float(sepa_var_threshold)
        self.sepa_warmup = int(sepa_warmup)
        self.eps = float(eps)
        self.var_ema: float | None = None
        self.var_0: float | None = None
        self.warmup_seen = 0
        self.gate_open = self.sepa_correct_rate_gate <= 0

    def enabled(self) -> bool:
        return self.sepa_steps > 0 or self.sepa_schedule == "auto"

    def observe_correct_rate(self, correct_rate: float | None) -> None:
        """Open the gate (for good) once a step's correct rate reaches the gate; NaN/None are ignored."""
        if self.gate_open or correct_rate is None or not math.isfinite(correct_rate):
            return
        if self.sepa_correct_rate_gate > 0 and correct_rate >= self.sepa_correct_rate_gate:
            self.gate_open = True

    def linear_lambda(self, step: float) -> float:
        if self.sepa_steps <= 0:
            return 0.0
        x = step - self.sepa_delay_steps
        return 0.0 if x <= 0 else min(x / self.sepa_steps, 1.0)

    def auto_lambda(self) -> float:
        if self.sepa_schedule != "auto" or self.var_ema is None or self.var_0 is None:
            return 0.0
        ratio = max(0.0, self.var_ema / max(self.var_0, self.eps))
        return 1.0 - min(ratio / max(self.sepa_var_threshold, self.eps), 1.0)

    def resolve_lambda(self, step: float) -> float:
        """Lambda for this step (resolve it before sampling)."""
        if not self.gate_open:
            return 0.0
        if self.sepa_schedule == "auto":
            return max(self.auto_lambda(), self.linear_lambda(step))
        return self.linear_lambda(step)

    def update_auto_state(self, exec_surprisals: Iterable[float]) -> None:
        """Feed one sampled sequence's execution-token surprisals (auto schedule only)."""
        if self.sepa_schedule != "auto":
            return
        values = [float(e) for e in exec_surprisals if math.isfinite(e) and 0 <= e <= _MAX_VALUE]
        if not values:
            return
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / len(values)
        d = self.sepa_ema_decay
        self.var_ema = var if self.var_ema is None else d * self.var_ema + (1 - d) * var
        if self.var_0 is None:
            self.warmup_seen += 1
            if self.warmup_seen >= self.sepa_warmup:
                self.var_0 = max(self.var_ema, self.eps)

    def state_dict(self) -> dict[str, object]:
        keys = (
            "sepa_steps", "sepa_schedule", "sepa_delay_steps", "sepa_correct_rate_gate", "sepa_ema_decay",
            "sepa_var_threshold", "sepa_warmup", "eps", "var_ema", "var_0", "warmup_seen", "gate_open",
        )
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore var_ema, var_0 (finite or None), warmup_seen (>= 0) and gate_open; settings stay."""
        self.var_ema = _finite_or_none(state.get("var_ema"), "var_ema")
        self.var_0 = _finite_or_none(state.get("var_0"), "var_0")
        seen = int(cast("int", state.get("warmup_seen", 0)))  # int() refuses what is not a count
        if seen < 0:
            raise ValueError(f"SEPA state: warmup_seen must be >= 0 (got {seen}).")
        self.warmup_seen = seen
        gate = state.get("gate_open", self.gate_open)
        if not isinstance(gate, bool):
            raise ValueError(f"SEPA state: gate_open must be a bool (got {gate!r}).")
        self.gate_open = gate


def _finite_or_none(value: object, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"SEPA state: {key} must be a finite number or None (got {value!r}).")
    return float(value)
