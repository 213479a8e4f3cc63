"""Per-run USL back-pressure controller: the original's semantics (spec 4), checkpointable.

Each observation gives p = batch_size*group_size (clamped to the bounds) and X = total_tokens/step_time
(0 when step_time <= eps; negative or NaN inputs count as 0). The fit (see `fit.py`) runs after every
non-skipped observation with >= 3 valid points; an EMA of X (seeded by the first non-skipped
observation) is the measured throughput. Regimes (spec 4.2): "warmup" while step_count <=
warmup_steps (skipped observations count), "retrograde" when kappa > 0, p > p*·throttle_margin and
p* > 1, then the roofline hint (below), then ema/(lambda·C(p)): > 1.1 "memory_bound", < 0.8
"retrograde", else "optimal". Recommendation (spec 4.3): the safe point is p*·throttle_margin clipped
to [min_bs·min_gs, max_bs·max_gs]; retrograde -> "throttle" to int(safe/gs); p < safe·increase_margin
-> "increase" to the same; else "hold". Group size is never changed.

Departures from the original, deliberate:
- Roofline hint. The original compares the unitless C(p) with peak_gflops·1e9, so it is always
  "memory_bound". Here, with `peak_gflops > 0` and `peak_bw_gb_s > 0` (the original's condition, same
  place in the precedence), `from_config` counts the model's shapes (models/flops.py) and the regime
  is the binding roof at the step's arithmetic intensity: FLOPs over bytes moved per token at the
  step's p and mean sequence length against the ridge peak_gflops / peak_bw_gb_s
  (backpressure/usl.py; the decision carries bp_intensity, bp_ridge and the achieved GFLOP/s and
  GB/s). With `peak_gflops` alone, the predicted compute rate lambda·C(p) tokens/s × 6·N FLOP/token is
  compared with peak_gflops·1e9 FLOP/s; > 0.7 of peak is "compute_bound", below "memory_bound". With
  the default 0 the branch is off, as in the original.
- Before the first fit lambda is 0, not the original's placeholder 1.0: the regime stays "optimal",
  utilization 1.0 and the action "hold" until a model exists (the original derives labels, and can
  throttle, from lambda = 1; docs/backpressure.md).
- `state_dict()`/`load_state_dict()` carry the whole window, sums, EMA and counters (JSON-safe),
  so a resumed run decides exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from retrain_ray.backpressure.fit import EPS, USLWindow, usl_capacity, usl_optimal_p
from retrain_ray.backpressure.types import Decision
from retrain_ray.models.context import ModelShapes

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import BackpressureSection
    from retrain_ray.config.sections_training import BackendSection, ModelSection

__all__ = ["USLController", "usl_capacity", "usl_optimal_p"]

_STATE_VERSION = 1


def _finite_nonneg(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0.0
    return f if math.isfinite(f) and f > 0.0 else 0.0


def _clamp_int(v: Any, lo: int, hi: int) -> int:
    try:
        i = int(v)
    except (TypeError, ValueError):
        i = 1
    return max(lo, min(hi, i))


def roofline_flops_per_token(backpressure: BackpressureSection, model: ModelSection) -> float:
    """FLOPs per trained token of the run's model when `[backpressure] peak_gflops` turns the roofline
    hint on (6·N, models/flops.py); 0 (hint off) otherwise."""
    if backpressure.peak_gflops <= 0.0:
        return 0.0
    # deferred: builds the model's architecture with transformers, needed only when the hint is on
    from retrain_ray.models.flops import train_flops_per_token

    return train_flops_per_token(model.model, revision=model.revision)


def roofline_shapes(bp: BackpressureSection, model: ModelSection, backend: BackendSection) -> ModelShapes | None:
    """The run's model shapes when both `peak_gflops` and `peak_bw_gb_s` turn the roofline on; None otherwise."""
    if bp.peak_gflops <= 0.0 or bp.peak_bw_gb_s <= 0.0:
        return None
    # deferred: builds the model's architecture with transformers, needed only when the roofline is on
    from retrain_ray.backends.registry import lora_targets_of
    from retrain_ray.models.flops import model_shapes

    targets = lora_targets_of(backend.backend, backend.options)
    return model_shapes(model.model, full=model.finetune == "full", lora_rank=model.lora_rank,
                        target_modules=targets, revision=model.revision)


class USLController:
    """Fits USL over a sliding window of a run's steps and recommends a batch size."""

    def __init__(
        self,
        warmup_steps: int = 10,
        ema_decay: float = 0.9,
        throttle_margin: float = 0.85,
        increase_margin: float = 0.5,
        min_batch_size: int = 1,
        max_batch_size: int = 64,
        min_group_size: int = 2,
        max_group_size: int = 64,
        peak_gflops: float = 0.0,
        peak_bw_gb_s: float = 0.0,
        window: int = 100,
        flops_per_token: float = 0.0,
        shapes: ModelShapes | None = None,
    ) -> None:
        _validate(warmup_steps, ema_decay, throttle_margin, increase_margin, min_batch_size,
                  max_batch_size, min_group_size, max_group_size)
        self.warmup_steps = int(warmup_steps)
        self.ema_decay = float(ema_decay)
        self.throttle_margin = float(throttle_margin)
        self.increase_margin = float(increase_margin)
        self.min_batch_size, self.max_batch_size = int(min_batch_size), int(max_batch_size)
        self.min_group_size, self.max_group_size = int(min_group_size), int(max_group_size)
        self.peak_gflops, self.peak_bw_gb_s = float(peak_gflops), float(peak_bw_gb_s)
        self.flops_per_token = float(flops_per_token)
        self.shapes = shapes
        self.last_seq_len = 1.0  # mean tokens per sequence of the latest step (the roofline's L)
        self.window = USLWindow(window)
        self.step_count = 0
        self.ema: float | None = None
        self.sigma, self.kappa, self.lam, self.p_star = 0.0, 0.0, 0.0, 1.0
        self.regime = "warmup"
        self.last_bs, self.last_gs = self.min_batch_size, self.min_group_size

    @classmethod
    def from_config(cls, bp: BackpressureSection, model: ModelSection, backend: BackendSection) -> USLController:
        """Build from the [backpressure] section, with the model's roofline figures."""
        return cls(
            warmup_steps=bp.warmup_steps, ema_decay=bp.ema_decay, throttle_margin=bp.throttle_margin,
            increase_margin=bp.increase_margin, min_batch_size=bp.min_batch_size,
            max_batch_size=bp.max_batch_size, peak_gflops=bp.peak_gflops, peak_bw_gb_s=bp.peak_bw_gb_s,
            flops_per_token=roofline_flops_per_token(bp, model), shapes=roofline_shapes(bp, model, backend),
        )

    def observe(self, step_time_s: float, batch_size: int, group_size: int, total_tokens: int,
                skipped: bool = False) -> None:
        """Record one step. Skipped steps only advance the step counter."""
        self.step_count += 1
        if skipped:
            return
        bs = _clamp_int(batch_size, 1, self.max_batch_size)
        gs = _clamp_int(group_size, 1, self.max_group_size)
        p = float(bs * gs)
        t = _finite_nonneg(step_time_s)
        x = _finite_nonneg(total_tokens) / t if t > EPS else 0.0
        self.window.add(p, x)
        self.ema = x if self.ema is None else self.ema_decay * self.ema + (1.0 - self.ema_decay) * x
        self.last_bs, self.last_gs = bs, gs
        self.last_seq_len = max(_finite_nonneg(total_tokens) / p, 1.0)
        fit = self.window.fit()
        if fit is not None:
            self.sigma, self.kappa, self.lam, self.p_star = fit.sigma, fit.kappa, fit.lam, fit.p_star
        self.regime = self._classify(p)

    def _classify(self, p: float) -> str:
        if self.step_count <= self.warmup_steps:
            return "warmup"
        if self.kappa > EPS and p > self.p_star * self.throttle_margin and self.p_star > 1.0:
            return "retrograde"
        roof = self._roofline()
        if roof is not None:
            return roof.regime
        predicted = self.lam * usl_capacity(p, self.sigma, self.kappa)
        if self.peak_gflops > 0.0 and self.flops_per_token > 0.0:
            ratio = predicted * self.flops_per_token / (self.peak_gflops * 1e9)
            return "compute_bound" if ratio > 0.7 else "memory_bound"
        if self.window.n_valid >= 3 and self.lam > EPS and predicted > EPS:
            r = (self.ema or 0.0) / predicted
            if r > 1.1:
                return "memory_bound"
            if r < 0.8:
                return "retrograde"
        return "optimal"

    def _roofline(self) -> RooflinePoint | None:
        """The latest step on the roofline (both peaks and the model's shapes known), else None."""
        if self.shapes is None or self.peak_gflops <= 0.0 or self.peak_bw_gb_s <= 0.0:
            return None
        return roofline_point(self.shapes, p=float(self.last_bs * self.last_gs), seq_len=self.last_seq_len,
                              tokens_per_s=self.ema or 0.0, peak_gflops=self.peak_gflops,
                              peak_bw_gb_s=self.peak_bw_gb_s)

    def _safe_p(self) -> float:
        lo = float(self.min_batch_size * self.min_group_size)
        hi = float(self.max_batch_size * self.max_group_size)
        safe = self.p_star * self.throttle_margin
        return hi if not math.isfinite(safe) else min(hi, max(lo, safe))

    def recommend(self) -> Decision:
        """The decision after the latest observation (spec 4.3)."""
        throughput = self.ema or 0.0
        if self.step_count <= self.warmup_steps:
            return self._decision("hold", 0.0, throughput, self.last_bs)
        peak = self.lam * usl_capacity(self.p_star, self.sigma, self.kappa)
        utilization = max(0.0, throughput / peak) if peak > EPS else 1.0
        safe = self._safe_p()
        target_bs = max(self.min_batch_size, min(self.max_batch_size, int(safe / self.last_gs)))
        if self.regime == "retrograde":
            return self._decision("throttle", utilization, throughput, target_bs)
        if self.last_bs * self.last_gs < safe * self.increase_margin:
            return self._decision("increase", utilization, throughput, target_bs)
        return self._decision("hold", utilization, throughput, self.last_bs)

    def _decision(self, action: str, utilization: float, throughput: float, bs: int) -> Decision:
        roof = self._roofline()
        return Decision(
            action=action, regime=self.regime, p_star=self.p_star, sigma=self.sigma, kappa=self.kappa,
            lam=self.lam, utilization=utilization, throughput=throughput,
            recommended_batch_size=int(bs), recommended_group_size=int(self.last_gs),
            roofline=roof.to_metrics() if roof is not None else None,
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything that affects later decisions, JSON-serialisable."""
        return {
            "version": _STATE_VERSION, "window": self.window.state_dict(), "step_count": self.step_count,
            "ema": self.ema, "sigma": self.sigma, "kappa": self.kappa, "lam": self.lam,
            "p_star": self.p_star, "regime": self.regime, "last_bs": self.last_bs, "last_gs": self.last_gs,
            "last_seq_len": self.last_seq_len,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if d.get("version") != _STATE_VERSION:
            raise ValueError(
                f"back-pressure state version {d.get('version')!r} is not {_STATE_VERSION}; "
                "this checkpoint was written by another retrain-ray version: resume without it"
            )
        self.window.load_state_dict(d["window"])
        self.step_count = int(d["step_count"])
        self.ema = None if d["ema"] is None else float(d["ema"])
        self.sigma, self.kappa = float(d["sigma"]), float(d["kappa"])
        self.lam, self.p_star = float(d["lam"]), float(d["p_star"])
        self.regime = str(d["regime"])
        self.last_bs, self.last_gs = int(d["last_bs"]), int(d["last_gs"])
        self.last_seq_len = float(d.get("last_seq_len", 1.0))  # absent in checkpoints before the roofline


def _validate(warmup: int, ema: float, throttle: float, increase: float, min_bs: int, max_bs: int,
              min_gs: int, max_gs: int) -> None:
    problems = []
    if warmup < 0:
        problems.append(f"backpressure.warmup_steps must be >= 0, got {warmup!r}")
    if not 0.0 <= ema <= 1.0:
        problems.append(f"backpressure.ema_decay must be in [0, 1], got {ema!r}")
    for name, v in (("throttle_margin", throttle), ("increase_margin", increase)):
        if not 0.0 < v <= 1.0:
            problems.append(f"backpressure.{name} must be in (0, 1], got {v!r}")
    for name, lo, hi in (("batch_size", min_bs, max_bs), ("group_size", min_gs, max_gs)):
        if lo < 1:
            problems.append(f"backpressure.min_{name} must be >= 1, got {lo!r}")
        if hi < lo:
            problems.append(f"backpressure.max_{name} ({hi!r}) must be >= min_{name} ({lo!r})")
    if problems:
        raise ValueError("; ".join(problems))


# The roofline hint (seed 003): FLOPs and bytes per token from the model's shapes, the arithmetic
# intensity, the ridge point and the roof that binds. Pure functions; docs/backpressure.md has the formulas.
#
# A step of p = batch_size x group_size sequences of mean length L (= the step's tokens / p) samples
# every token and trains on it. Per token, with N parameters, N_t trainable ones (N for full fine-tuning,
# the LoRA adapters' otherwise), b bytes per weight and k bytes of KV cache per token:
#
#     FLOPs  F = 2N (sampling forward) + 6N (full: forward, activation and weight gradients)
#                                      | 4N + 6N_t (LoRA: no weight gradients of the frozen weights)
#     bytes  B = N*b / p              decoding reads every weight once per position, shared by p sequences
#              + k * L / 2            a token attends to L/2 cached tokens on average
#              + (3 N*b + 28 N_t) / (p*L)   training reads the weights 3 times per step, AdamW moves
#                                           28 bytes per trainable parameter (fp32 p, g, m, v read; p, m, v written)
#     intensity I = F / B (FLOP/byte);   ridge R = peak_gflops / peak_bw_gb_s (FLOP/byte)
#     regime = "compute_bound" if I >= R else "memory_bound"
#
# The measured throughput X (tokens/s, the controller's EMA) places the run under its roof: X*F/1e9
# GFLOP/s achieved and X*B/1e9 GB/s moved (logged, not used for the label: the binding roof is the one
# whose utilisation X*F/peak_flops or X*B/peak_bw is larger, and their ratio is I/R whatever X is).
__all__ = ["ModelShapes", "RooflinePoint", "bytes_per_token", "flops_per_token", "roofline_point"]

ADAMW_BYTES_PER_TRAINABLE = 28.0  # fp32 param, grad, m, v read; param, m, v written
TRAIN_WEIGHT_READS = 3.0  # forward, activation gradients, weight gradients


def flops_per_token(s: ModelShapes) -> float:
    """F: sampling forward plus the training step's FLOPs, per token."""
    train = 6.0 * s.parameters if s.full else 4.0 * s.parameters + 6.0 * s.trainable
    return 2.0 * s.parameters + train


def bytes_per_token(s: ModelShapes, p: float, seq_len: float) -> float:
    """B: bytes moved per token at p concurrent sequences of mean length `seq_len` (both >= 1)."""
    p, seq_len = max(p, 1.0), max(seq_len, 1.0)
    weights = float(s.parameters * s.bytes_per_param)
    decode = weights / p + s.kv_bytes_per_token * seq_len / 2.0
    train = (TRAIN_WEIGHT_READS * weights + ADAMW_BYTES_PER_TRAINABLE * s.trainable) / (p * seq_len)
    return decode + train


@dataclass(frozen=True)
class RooflinePoint:
    intensity: float  # FLOP/byte
    ridge: float  # FLOP/byte
    regime: str  # "compute_bound" | "memory_bound"
    achieved_gflops: float
    achieved_gb_s: float

    def to_metrics(self) -> dict[str, float]:
        return {"bp_intensity": self.intensity, "bp_ridge": self.ridge,
                "bp_achieved_gflops": self.achieved_gflops, "bp_achieved_gb_s": self.achieved_gb_s}


def roofline_point(s: ModelShapes, *, p: float, seq_len: float, tokens_per_s: float, peak_gflops: float,
                   peak_bw_gb_s: float) -> RooflinePoint:
    """Where a step of p sequences of mean length `seq_len` sits on the roofline of the given peaks (> 0)."""
    flops, moved = flops_per_token(s), bytes_per_token(s, p, seq_len)
    intensity, ridge = flops / moved, peak_gflops / peak_bw_gb_s
    return RooflinePoint(intensity, ridge, "compute_bound" if intensity >= ridge else "memory_bound",
                         tokens_per_s * flops / 1e9, tokens_per_s * moved / 1e9)
