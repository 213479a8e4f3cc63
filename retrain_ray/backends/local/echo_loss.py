"""The ECHO term of a local train step (algorithms/echo.py): `weight` times the mean cross-entropy of the
batch's echo targets, added to each micro-batch's RL loss before its backward pass (same forward)."""

from __future__ import annotations

import torch

from retrain_ray.algorithms.echo import echo_nll
from retrain_ray.backends.local.batching import MicroBatch
from retrain_ray.backends.types import TrainBatch


class EchoSums:
    """Accumulates the ECHO loss over a step's micro-batches; no term when the batch has no targets."""

    def __init__(self, batch: TrainBatch) -> None:
        masks = batch.echo_mask_D or []
        self.targets = int(sum(1 for row in masks for m in row[1:] if m != 0.0))
        self.weight = batch.echo_weight
        self.floor = batch.echo_entropy_floor
        self.enabled = batch.echo_mask_D is not None
        self.nll = 0.0
        self.kept = 0

    def term(self, logits_B_S_V: torch.Tensor, mb: MicroBatch) -> torch.Tensor | float:
        """This micro-batch's share of `weight * mean NLL` (0.0 without targets)."""
        if mb.echo_mask_B_S is None or self.targets == 0 or self.weight == 0:
            return 0.0
        nll, kept = echo_nll(logits_B_S_V, mb.targets_B_S, mb.echo_mask_B_S, self.floor)
        self.nll += float(nll.detach())
        self.kept += int(kept)
        return self.weight * nll / self.targets

    def metrics(self) -> dict[str, float]:
        if not self.enabled:
            return {}
        return {"echo/enabled": 1.0, "echo/target_tokens": float(self.targets), "echo/kept_tokens": float(self.kept),
                "echo/loss": self.nll / self.kept if self.kept else 0.0, "echo/weight": self.weight}
