"""Trainer-side log-probabilities of the sampled tokens, under the sampler's own distribution.

`scored_logprobs` runs one forward pass over a micro-batch and scores every next token with
`retrain_ray.engines.pytorch.engine.token_logprobs` at the batch's temperature and the sampler's top_p:
the same function the sampler used. So on the first on-policy update new == old log-probs and the
importance ratio is 1 (fixes hazard 13.8 of the original, whose trainer used the T=1 softmax).

The ECHO term of a local train step (algorithms/echo.py): `weight` times the mean cross-entropy of the
batch's echo targets, added to each micro-batch's RL loss before its backward pass (same forward).

TrainBatch rows -> right-padded tensors, aligned for next-token scoring, in micro-batches.

Row i holds prompt + completion tokens; `logprobs_D[i]` / `advantages_D[i]` are aligned per token with
0 at prompt positions. Position t of the model output predicts token t+1, so the targets, old
logprobs and advantages are the row's values shifted by one (`[:, 1:]`), as in the original
(spec 3.1). A token is an *action token* (in the loss) when it is a real token with nonzero
advantage. Right padding is safe for a causal model: pads come after every real token, and positions
0..n-1 equal the sampler's (which counts positions from the first real token).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from retrain_ray.algorithms.echo import echo_nll
from retrain_ray.backends.types import TrainBatch
from retrain_ray.engines.pytorch.engine import autocast_for, token_logprobs


def scored_logprobs(model: torch.nn.Module, mb: MicroBatch, temperature: float, top_p: float) -> torch.Tensor:
    """new_logprobs_B_S (S = T - 1), with gradient."""
    return logprobs_from_logits(next_token_logits(model, mb), mb, temperature, top_p)


def logprobs_from_logits(logits_B_S_V: torch.Tensor, mb: MicroBatch, temperature: float, top_p: float) -> torch.Tensor:
    b, s, v = logits_B_S_V.shape
    flat_N = token_logprobs(logits_B_S_V.reshape(b * s, v), mb.targets_B_S.reshape(b * s), temperature, top_p)
    return flat_N.view(b, s)


def next_token_logits(model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor:
    """logits_B_S_V (float32) of the next token at each position but the last: one forward pass."""
    ids_B_T = mb.input_ids_B_T
    positions_B_T = torch.arange(ids_B_T.shape[1], device=ids_B_T.device).expand_as(ids_B_T)
    with autocast_for(ids_B_T.device):
        # use_cache=False: a scoring pass has no next token, so the KV cache the config asks for is waste
        logits_B_T_V = model(input_ids=ids_B_T, attention_mask=mb.attention_mask_B_T, position_ids=positions_B_T,
                             use_cache=False).logits
    return logits_B_T_V[:, :-1, :].float()


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


@dataclass(frozen=True)
class MicroBatch:
    input_ids_B_T: torch.Tensor  # full rows (T = longest row), right padded
    attention_mask_B_T: torch.Tensor
    targets_B_S: torch.Tensor  # S = T - 1: token predicted at each position
    old_logprobs_B_S: torch.Tensor
    advantages_B_S: torch.Tensor
    action_mask_B_S: torch.Tensor  # bool: real target with nonzero advantage
    echo_mask_B_S: torch.Tensor | None = None  # ECHO targets (float 0/1), when the batch has any


def count_action_tokens(batch: TrainBatch) -> int:
    """Tokens after the first of each row with nonzero advantage (what the loss is averaged over)."""
    return sum(sum(1 for a in adv[1:] if a != 0.0) for adv in batch.advantages_D)


def _pad(rows: list[list[float]] | list[list[int]], width: int, dtype: torch.dtype) -> torch.Tensor:
    """Right-padded with zeros, built in one `torch.tensor` call (not one per row)."""
    return torch.tensor([list(row) + [0] * (width - len(row)) for row in rows], dtype=dtype)


def make_microbatch(batch: TrainBatch, rows: range, device: torch.device) -> MicroBatch:
    tokens = [batch.tokens_D[i] for i in rows]
    width = max(2, max(len(t) for t in tokens))
    ids = _pad(tokens, width, torch.long)
    mask = _pad([[1] * len(t) for t in tokens], width, torch.long)
    old = _pad([batch.logprobs_D[i] for i in rows], width, torch.float32)
    adv = _pad([batch.advantages_D[i] for i in rows], width, torch.float32)
    action = (mask[:, 1:] > 0) & (adv[:, 1:] != 0)
    echo = None
    if batch.echo_mask_D is not None:
        echo = _pad([batch.echo_mask_D[i] for i in rows], width, torch.float32)[:, 1:].to(device)
    return MicroBatch(
        input_ids_B_T=ids.to(device),
        attention_mask_B_T=mask.to(device),
        targets_B_S=ids[:, 1:].to(device),
        old_logprobs_B_S=old[:, 1:].to(device),
        advantages_B_S=adv[:, 1:].to(device),
        action_mask_B_S=action.to(device),
        echo_mask_B_S=echo,
    )


def microbatches(batch: TrainBatch, micro_batch_size: int, device: torch.device) -> Iterator[MicroBatch]:
    """Consecutive slices of `micro_batch_size` rows (0 = the whole batch in one forward)."""
    n = len(batch.tokens_D)
    size = n if micro_batch_size <= 0 else micro_batch_size
    for start in range(0, n, size):
        yield make_microbatch(batch, range(start, min(start + size, n)), device)
