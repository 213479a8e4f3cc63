"""Sampling from the shared trainer's one copy: several runs' requests decoded in one batched loop, each row
under its own run's adapter (issue 36, item 3).

It is the PyTorch engine's decode (engines/pytorch/engine.py) over the rows of every run in the call: the
prompts of all runs left-padded into one batch, positions counted from each row's first real token, one
forward per token with a KV cache. The routing is set once for the whole decode (`SharedTrainer.serving`):
row b keeps its run's adapter at every step, since the batch keeps its rows in place (a run whose rows are
all finished feeds pad tokens, as the engine's finished rows do, until the last run is done).

Each run samples as its own engine would: its own temperature, top-p, `max_tokens` and entropies, and its
tokens drawn from **its own** `torch.Generator`: per step the very random numbers its engine's
`torch.multinomial` over its rows draws, the rest of the draw batched over all runs (draws.py). A run draws only while it has an unfinished row and below its own
`max_tokens`, exactly the steps its solo engine draws. So a run's tokens do not depend on which other
runs share the decode, and with the same seed they are its solo `PyTorchEngine`'s tokens, up to the float
rounding of a wider batch and the grouped LoRA's sum order (a draw that falls within that rounding of a
token boundary could differ; the tests see none).

The generator of a run is made from the call's `seed` on its first call and then advances across calls, as
the solo engine's `engine.generator` does; a call with another seed starts a new generator from it.
`SamplingStreams.generator(run_id)` is the generator itself, for checkpoints (`get_state`/`set_state`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch

from retrain_ray.engines.pytorch.engine import autocast_for, check_request, left_pad
from retrain_ray.engines.types import SampleResult
from retrain_ray.models.lean_llama import KVCache
from retrain_ray.shared_trainer.draws import BatchedDraws, RunRows, StepDraw
from retrain_ray.shared_trainer.types import SampleRequest


class SamplingStreams:
    """Each member run's sampling generator, made from its seed and kept across calls."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._streams: dict[str, tuple[int, torch.Generator]] = {}

    def for_call(self, run_id: str, seed: int) -> torch.Generator:
        """The run's generator for a call with `seed`: its running one, or a new one for a new seed."""
        current = self._streams.get(run_id)
        if current is None or current[0] != seed:
            current = (seed, torch.Generator(device=self.device).manual_seed(seed))
            self._streams[run_id] = current
        return current[1]

    def generator(self, run_id: str) -> torch.Generator | None:
        """The run's generator (None before its first call): checkpoint it with `get_state`/`set_state`."""
        current = self._streams.get(run_id)
        return None if current is None else current[1]

    def drop(self, run_id: str) -> None:
        self._streams.pop(run_id, None)


def check_requests(requests: dict[str, SampleRequest]) -> None:
    """The engine's checks of each request, the run named in the error."""
    for run_id, request in requests.items():
        try:
            check_request(request.prompt_ids_P, request.num_samples, request.params)
        except ValueError as exc:
            raise ValueError(f"run {run_id!r}: {exc}") from exc


def layout_rows(requests: Sequence[SampleRequest], generators: Sequence[torch.Generator]
                ) -> tuple[list[list[int]], list[RunRows], torch.Tensor]:
    """Every run's rows (prompt x num_samples, the engine's order) one after another; the runs' row spans;
    rows_B, each row's index into `requests`."""
    rows_N: list[list[int]] = []
    spans: list[RunRows] = []
    index_N: list[int] = []
    for i, (request, generator) in enumerate(zip(requests, generators, strict=True)):
        start = len(rows_N)
        rows_N += [list(p) for p in request.prompt_ids_P for _ in range(request.num_samples)]
        spans.append(RunRows(start, len(rows_N), request.params, generator))
        index_N += [i] * (len(rows_N) - start)
    return rows_N, spans, torch.tensor(index_N, dtype=torch.long)


class PreallocatedCache(KVCache):
    """The lean model's KV cache with room for the whole decode: each step writes its keys and values in
    place, where `KVCache` concatenates (copying the whole cache at every token)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.lengths: list[int] = []

    def get_seq_length(self) -> int:
        return self.lengths[0] if self.lengths else 0

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        if layer == len(self.layers):
            shape = (*keys.shape[:2], self.capacity, keys.shape[-1])
            self.layers.append((keys.new_empty(shape), values.new_empty(shape)))
            self.lengths.append(0)
        k_buf, v_buf = self.layers[layer]
        start, stop = self.lengths[layer], self.lengths[layer] + keys.shape[-2]
        k_buf[:, :, start:stop], v_buf[:, :, start:stop] = keys, values
        self.lengths[layer] = stop
        return k_buf[:, :, :stop], v_buf[:, :, :stop]


@dataclass(frozen=True)
class DecodeTrace:
    """A decode's draws, step by step over all rows: `tokens_N_S`, `logprobs_N_S` and `entropies_N_S` (None
    when no run asked for entropies). A run's trace is its rows' first `span.drawn` steps."""

    tokens_N_S: torch.Tensor
    logprobs_N_S: torch.Tensor
    entropies_N_S: torch.Tensor | None


@torch.inference_mode()
def decode(model: torch.nn.Module, rows_N: list[list[int]], spans: list[RunRows], *, eos_ids: Sequence[int],
           pad_token_id: int, device: torch.device) -> DecodeTrace:
    """One batched decode of all rows (routing already set); each run's draws as its engine's (draws.py)."""
    ids_N_L, prompt_mask_N_L = left_pad(rows_N, pad_token_id, device)
    width = ids_N_L.shape[1]
    longest = max(span.params.max_tokens for span in spans)
    mask_N_C = torch.ones(len(rows_N), width + longest, dtype=torch.long, device=device)
    mask_N_C[:, :width] = prompt_mask_N_L
    eos_E = torch.tensor(list(eos_ids), device=device)
    done_N = torch.zeros(len(rows_N), dtype=torch.bool, device=device)
    position_N_L = (prompt_mask_N_L.cumsum(-1) - 1).clamp_min(0)
    past = PreallocatedCache(width + longest)
    owner_N = torch.cat([torch.full((span.stop - span.start,), i, device=device) for i, span in enumerate(spans)])
    draws: BatchedDraws | None = None
    steps: list[StepDraw] = []
    while True:
        with autocast_for(device):
            out = model(input_ids=ids_N_L, attention_mask=mask_N_C[:, :width + len(steps)], position_ids=position_N_L,
                        past_key_values=past, use_cache=True)
        logits_N_V = out.logits[:, -1, :]
        draws = draws or BatchedDraws(spans, len(rows_N), logits_N_V.shape[-1], pad_token_id, device)
        steps.append(draws.draw(logits_N_V))
        done_N |= torch.isin(steps[-1].token_N, eos_E)
        if _close_finished(spans, done_N, owner_N, len(steps)):
            draws.closed()
        if not any(span.active for span in spans):
            return _stacked(steps, spans)
        ids_N_L = steps[-1].token_N.masked_fill(done_N, pad_token_id).unsqueeze(1)
        position_N_L = position_N_L[:, -1:] + 1


def _close_finished(spans: list[RunRows], done_N: torch.Tensor, owner_N: torch.Tensor, step: int) -> bool:
    """A run stops drawing when all its rows hit EOS or at its own `max_tokens` (its engine's `break`);
    True when one stopped."""
    finished_R = cast("list[int]", torch.zeros(len(spans), dtype=torch.long, device=done_N.device)  # pyright: ignore[reportUnknownMemberType]
                      .index_add_(0, owner_N, done_N.long()).tolist())
    closed = False
    for span, finished in zip(spans, finished_R, strict=True):
        if span.active and (step >= span.params.max_tokens or finished == span.stop - span.start):
            span.active, closed = False, True
    return closed


def _stacked(steps: list[StepDraw], spans: list[RunRows]) -> DecodeTrace:
    entropies: torch.Tensor | None = None
    if any(span.params.compute_entropy for span in spans):
        zeros_N = torch.zeros_like(steps[0].logprob_N)
        entropies = torch.stack([zeros_N if s.entropy_N is None else s.entropy_N for s in steps], 1)
    return DecodeTrace(torch.stack([s.token_N for s in steps], 1), torch.stack([s.logprob_N for s in steps], 1),
                       entropies)


def results_of(span: RunRows, trace: DecodeTrace, eos_ids: Sequence[int]) -> list[SampleResult]:
    """The run's SampleResults, row by row, as its engine's `_Trace.results` makes them: each row cut after
    its first EOS ("stop"), else all its tokens ("length")."""
    if not span.drawn:
        return []
    rows = slice(span.start, span.stop)
    tokens_R_S = trace.tokens_N_S[rows, :span.drawn]
    eos_R_S = torch.isin(tokens_R_S, torch.tensor(list(eos_ids), device=tokens_R_S.device))
    stopped_R = eos_R_S.any(1)
    length_R = torch.where(stopped_R, eos_R_S.int().argmax(1) + 1, tokens_R_S.shape[1])
    tokens, logprobs = _int_rows(tokens_R_S), _float_rows(trace.logprobs_N_S[rows, :span.drawn])
    entropies = (_float_rows(trace.entropies_N_S[rows, :span.drawn])
                 if span.params.compute_entropy and trace.entropies_N_S is not None else None)
    out: list[SampleResult] = []
    lengths, stops = cast("list[int]", length_R.tolist()), cast("list[bool]", stopped_R.tolist())  # pyright: ignore[reportUnknownMemberType]
    for r, (n, stopped) in enumerate(zip(lengths, stops, strict=True)):
        out.append(SampleResult(
            token_ids=tuple(tokens[r][:n]), logprobs=tuple(logprobs[r][:n]),
            finish_reason="stop" if stopped else "length",
            entropies=tuple(entropies[r][:n]) if entropies is not None else None))
    return out


def _int_rows(t_R_S: torch.Tensor) -> list[list[int]]:
    return cast("list[list[int]]", t_R_S.tolist())  # pyright: ignore[reportUnknownMemberType]  # torch: bare `List`


def _float_rows(t_R_S: torch.Tensor) -> list[list[float]]:
    return cast("list[list[float]]", t_R_S.tolist())  # pyright: ignore[reportUnknownMemberType]  # torch: bare `List`


def by_prompt(flat: list[SampleResult], request: SampleRequest) -> list[list[SampleResult]]:
    """results[P][num_samples], the engine's grouping of its flat rows."""
    n = request.num_samples
    return [flat[i * n:(i + 1) * n] for i in range(len(request.prompt_ids_P))]
