"""The roofline hint (seed 003): FLOPs and bytes per token from the model's shapes, the arithmetic
intensity, the ridge point and the roof that binds. Pure functions; docs/backpressure.md has the formulas.

A step of p = batch_size x group_size sequences of mean length L (= the step's tokens / p) samples
every token and trains on it. Per token, with N parameters, N_t trainable ones (N for full fine-tuning,
the LoRA adapters' otherwise), b bytes per weight and k bytes of KV cache per token:

    FLOPs  F = 2N (sampling forward) + 6N (full: forward, activation and weight gradients)
                                     | 4N + 6N_t (LoRA: no weight gradients of the frozen weights)
    bytes  B = N*b / p              decoding reads every weight once per position, shared by p sequences
             + k * L / 2            a token attends to L/2 cached tokens on average
             + (3 N*b + 28 N_t) / (p*L)   training reads the weights 3 times per step, AdamW moves
                                          28 bytes per trainable parameter (fp32 p, g, m, v read; p, m, v written)
    intensity I = F / B (FLOP/byte);   ridge R = peak_gflops / peak_bw_gb_s (FLOP/byte)
    regime = "compute_bound" if I >= R else "memory_bound"

The measured throughput X (tokens/s, the controller's EMA) places the run under its roof: X*F/1e9
GFLOP/s achieved and X*B/1e9 GB/s moved (logged, not used for the label: the binding roof is the one
whose utilisation X*F/peak_flops or X*B/peak_bw is larger, and their ratio is I/R whatever X is).
"""

from __future__ import annotations

from dataclasses import dataclass

from retrain_ray.models.context import ModelShapes

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
