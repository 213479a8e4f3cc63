"""The batched step: one forward and one backward per micro-batch round over every member's rows.

Each member splits its batch into micro-batches exactly as its solo backend does (backends/local/backend.py:
`micro_batch_size` rows, else the batch in `accumulation_steps` parts, else one forward). Round k puts
the k-th micro-batch of every member that has one into one forward (rows padded on the right to the
round's longest, each row under its own adapter: grouped_lora.py), then scores each member's slice with
its own temperature and top-p, takes its own `policy_loss` (its loss mode, clip settings and generator, in
its solo call order), divides the loss sum by the member's *own* batch token count and adds its ECHO term,
exactly the terms its solo step backpropagates. One backward of the sum gives every adapter the gradient
of its own terms alone: a row depends only on the base and its own adapter, so the other members' terms
contribute nothing to it. Then every member is clipped, stepped and measured as `apply_update` (the local
backend's own update) would do it alone, all members in one batched pass (update.py).

A member whose gradient norm is not finite gets its `NonFiniteError` back (its weights unchanged, as
alone); the others' updates go on. A member's non-finite loss is left out of the round's backward: a NaN
in one row's gradient would reach every member's A and B through the block mask (0 x NaN is NaN). A
finite loss whose gradient overflows still could; the others then fail their own finite-gradient check
(weights unchanged, an error each), never update from it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from retrain_ray.algorithms.loss import LossOutput, policy_loss
from retrain_ray.backends.local.scoring import (
    EchoSums,
    MicroBatch,
    count_action_tokens,
    logprobs_from_logits,
    microbatches,
)
from retrain_ray.backends.types import TrainBatch, TrainStepResult
from retrain_ray.engines.pytorch.engine import autocast_for
from retrain_ray.shared_trainer.adapters import RunAdapter
from retrain_ray.shared_trainer.grouped_lora import AdapterRouting
from retrain_ray.shared_trainer.routing import route
from retrain_ray.shared_trainer.types import StepRequest
from retrain_ray.shared_trainer.update import UpdateOrder, apply_updates
from retrain_ray.util.finite import NonFiniteError


def rows_per_microbatch(micro_batch_size: int, accumulation_steps: int, batch: TrainBatch) -> int:
    """The solo backend's rule: `micro_batch_size` rows, or the batch split into `accumulation_steps` parts
    (0 = one forward)."""
    if micro_batch_size > 0 or accumulation_steps <= 1:
        return micro_batch_size
    return -(-len(batch.tokens_D) // accumulation_steps)


@dataclass
class MemberStep:
    """One member's share of a shared step: its micro-batches, token total, ECHO sums and metric sums."""

    adapter: RunAdapter
    request: StepRequest
    index: int
    parts: list[MicroBatch]
    total: int
    echo: EchoSums
    sums: dict[str, float] = field(default_factory=lambda: {"loss": 0.0, "clip": 0.0, "cov": 0.0, "kl": 0.0,
                                                            "tokens": 0.0, "mb": 0.0})
    non_finite_loss: float | None = None  # a micro-batch's loss that was not finite: left out of the backward

    def add(self, out: LossOutput) -> None:
        self.sums["loss"] += float(out.loss_sum.detach())
        self.sums["clip"] += out.clip_fraction_sum
        self.sums["cov"] += out.cov_fraction_sum
        self.sums["kl"] += out.abs_kl_sum
        self.sums["tokens"] += out.num_action_tokens
        self.sums["mb"] += 1


@dataclass(frozen=True)
class SharedStepResult:
    """Each member's own `TrainStepResult`, and the members whose update was refused (non-finite gradient)."""

    results: dict[str, TrainStepResult]
    errors: dict[str, NonFiniteError]
    rows: int
    rounds: int


def _member(index: int, adapter: RunAdapter, request: StepRequest, device: torch.device) -> MemberStep:
    settings, batch = adapter.settings, request.batch
    size = rows_per_microbatch(settings.micro_batch_size, max(int(settings.accumulation_steps), 1), batch)
    return MemberStep(adapter, request, index, list(microbatches(batch, size, device)),
                      max(count_action_tokens(batch), 1), EchoSums(batch))


def shared_step(model: nn.Module, routing: AdapterRouting, keys: Sequence[str],
                members: Sequence[tuple[RunAdapter, StepRequest]], device: torch.device) -> SharedStepResult:
    """One update of every member's adapter from its own batch (module docstring)."""
    started = time.perf_counter()
    steps = [_member(i, adapter, request, device) for i, (adapter, request) in enumerate(members)]
    for member in steps:
        member.adapter.optimizer.zero_grad(set_to_none=True)
    rounds = max((len(m.parts) for m in steps), default=0)
    rows = 0
    for k in range(rounds):
        rows += _forward_backward(model, routing, keys, steps, [m for m in steps if k < len(m.parts)], k)
    errors = {m.adapter.run_id: _refuse(m) for m in steps if m.non_finite_loss is not None}
    updating = [m for m in steps if m.adapter.run_id not in errors]
    updates = apply_updates([UpdateOrder(m.adapter, m.request.lr, m.request.weight_decay) for m in updating])
    elapsed = time.perf_counter() - started
    results: dict[str, TrainStepResult] = {}
    for member, update in zip(updating, updates, strict=True):
        if isinstance(update, NonFiniteError):
            errors[member.adapter.run_id] = update
        else:
            member.adapter.version += 1
            results[member.adapter.run_id] = _result(member, update, elapsed)
    return SharedStepResult(results, errors, rows, rounds)


def _logits(model: nn.Module, ids_B_T: torch.Tensor, mask_B_T: torch.Tensor) -> torch.Tensor:
    """logits_B_S_V (float32) of the next token at each position but the last, as the solo step scores."""
    positions_B_T = torch.arange(ids_B_T.shape[1], device=ids_B_T.device).expand_as(ids_B_T)
    with autocast_for(ids_B_T.device):
        logits_B_T_V = model(input_ids=ids_B_T, attention_mask=mask_B_T, position_ids=positions_B_T,
                             use_cache=False).logits
    return logits_B_T_V[:, :-1, :].float()


def _padded(tensors: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in tensors])


def _forward_backward(model: nn.Module, routing: AdapterRouting, keys: Sequence[str], steps: Sequence[MemberStep],
                      present: Sequence[MemberStep], k: int) -> int:
    """Round k: one forward over the present members' k-th micro-batches, their losses, one backward."""
    parts = [m.parts[k] for m in present]
    width = max(mb.input_ids_B_T.shape[1] for mb in parts)
    ids_B_T = _padded([mb.input_ids_B_T for mb in parts], width)
    mask_B_T = _padded([mb.attention_mask_B_T for mb in parts], width)
    rows_B = torch.cat([torch.full((mb.input_ids_B_T.shape[0],), m.index, dtype=torch.long)
                        for m, mb in zip(present, parts, strict=True)]).to(ids_B_T.device)
    route(routing, keys, [m.adapter for m in steps], rows_B)
    try:
        logits_B_S_V = _logits(model, ids_B_T, mask_B_T)
        total: torch.Tensor | float = 0.0
        # split, not sliced: a slice's backward fills a zero gradient of the whole logits per member
        chunks = torch.split(logits_B_S_V, [mb.input_ids_B_T.shape[0] for mb in parts])
        for member, mb, chunk_B_S_V in zip(present, parts, chunks, strict=True):
            term = _member_loss(member, mb, chunk_B_S_V[:, :mb.targets_B_S.shape[1], :])
            if isinstance(term, torch.Tensor) and not bool(torch.isfinite(term.detach())):
                member.non_finite_loss = float(term.detach())  # its NaN would reach the others' gradients
                continue
            if member.non_finite_loss is None:
                total = total + term
        if isinstance(total, torch.Tensor):
            total.backward()  # pyright: ignore[reportUnknownMemberType]
    finally:
        routing.clear()
    return int(ids_B_T.shape[0])


def _member_loss(member: MemberStep, mb: MicroBatch, logits_B_S_V: torch.Tensor) -> torch.Tensor | float:
    """The member's solo micro-batch term: its loss sum over its own token total, plus its ECHO share."""
    settings = member.adapter.settings
    new_lp_B_S = logprobs_from_logits(logits_B_S_V, mb, member.request.batch.temperature, settings.top_p)
    out = policy_loss(new_lp_B_S, mb.old_logprobs_B_S, mb.advantages_B_S, mb.action_mask_B_S,
                      generator=member.adapter.generator, **asdict(settings.loss))
    member.add(out)
    return out.loss_sum / member.total + member.echo.term(logits_B_S_V, mb)


def _refuse(member: MemberStep) -> NonFiniteError:
    """A member whose loss was not finite: its gradients cleared, no step, its error (its solo words)."""
    member.adapter.optimizer.zero_grad(set_to_none=True)
    return NonFiniteError(
        f"gradient norm is nan at update {member.adapter.version + 1} (the loss was {member.non_finite_loss}): the "
        "optimizer step was skipped and the weights are unchanged; check the rewards, advantages and lr")


def _result(member: MemberStep, update: dict[str, float], elapsed_s: float) -> TrainStepResult:
    """The member's row: the solo `train_step`'s metric names and values."""
    sums, total = member.sums, member.total
    metrics = {
        "clip_fraction": sums["clip"] / total,
        "policy/cov_fraction": sums["cov"] / total,
        "policy/abs_kl": sums["kl"] / total,
        **update,
        "local_action_tokens": sums["tokens"],
        "local_microbatches": sums["mb"],
        "local_train_step_s": elapsed_s,
        **member.echo.metrics(),
    }
    return TrainStepResult(loss=sums["loss"] / total, metrics=metrics)
