"""TrainBatch rows -> right-padded tensors, aligned for next-token scoring, in micro-batches.

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

from retrain_ray.backends.types import TrainBatch


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
