"""A plugin backend written for the original: its `TrainHelper` (spec 1.6) as our engine and backend.

The original's backend factory returns one object that samples and trains on token lists:
`checkpoint(name)`, `sample(prompt_ids_list, num_samples, max_tokens, temperature, top_p)` -> per
prompt, (completion ids, logprobs) pairs; `train_step(all_tokens, all_logprobs, all_advantages, lr,
weight_decay) -> loss` with the three lists aligned per token (prompt positions 0, as our `TrainBatch`);
`save_adapter(path, name) -> reference`; `load_state(reference)`; optionally `sft_train_step(tokens,
advantages, lr, weight_decay)`. `HelperSampler` and `HelperBackend` share the helper:

* a weight sync calls `checkpoint(f"step_{version}")`, as the original does before each step's sampling;
* when the run asks for entropies (`uncertainty_kind = "shannon_entropy"`, which preflight allows only when
  the factory declares them, backends/registry.py) and the helper has `sample_with_entropy`, its triples
  `(ids, logprobs, entropies | None)` are used instead of `sample`'s pairs (spec 1.5);
* a finish reason is "length" when a completion reached `max_tokens`, else "stop";
* a checkpoint directory holds what `save_adapter(directory, "adapter")` wrote plus
  `original_helper.json` (its reference, relative when inside the directory, which is renamed once
  complete; a `tinker://` reference as is; and the update count), which `load_checkpoint` reads back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeGuard, cast

from retrain_ray.backends.types import TrainBatch, TrainStepResult
from retrain_ray.engines.types import SampleResult, SamplingParams, WeightsVersion, WeightUpdate

HELPER_METHODS = ("checkpoint", "sample", "train_step", "save_adapter", "load_state")
STATE_FILE = "original_helper.json"
SFT_LOSS_ATTRIBUTE = "sft_loss_fn"
"""The attribute the original's helpers read their warm-start loss from (its backend_definitions sets it)."""


Rows = list[list[int]]
SampleGroups = Sequence[Sequence[tuple[Sequence[int], Sequence[float]]]]
EntropyGroups = Sequence[Sequence[tuple[Sequence[int], Sequence[float], Sequence[float] | None]]]
SampleWithEntropy = Callable[[Rows, int, int, float, float], EntropyGroups]
SFTStep = Callable[[Rows, list[list[float]], float, float], float]


class TrainHelper(Protocol):
    """The original's TrainHelper, as far as this adapter calls it (optional: `sample_with_entropy(...)`
    like `sample` with triples, `sft_train_step(tokens_D, advantages_D, lr, weight_decay)`)."""

    def checkpoint(self, name: str, /) -> object: ...

    def sample(self, prompt_ids_P: Rows, num_samples: int, max_tokens: int, temperature: float, top_p: float,
               /) -> SampleGroups: ...

    def train_step(self, tokens_D: Rows, logprobs_D: list[list[float]], advantages_D: list[list[float]], lr: float,
                   weight_decay: float, /) -> float: ...

    def save_adapter(self, path: str, name: str, /) -> object: ...

    def load_state(self, reference: str, /) -> object: ...


def is_train_helper(obj: object) -> TypeGuard[TrainHelper]:
    return all(callable(getattr(obj, name, None)) for name in HELPER_METHODS)


class HelperSampler(WeightsVersion):
    """SamplingEngine over a TrainHelper's `sample` and `checkpoint`."""

    def __init__(self, helper: TrainHelper) -> None:
        self.helper = helper

    def generate(self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams
                 ) -> list[list[SampleResult]]:
        args = (prompt_ids_P, num_samples, params.max_tokens, params.temperature, params.top_p)
        with_entropy = cast("SampleWithEntropy | None", getattr(self.helper, "sample_with_entropy", None))
        if params.compute_entropy and with_entropy is not None:  # triples (ids, logprobs, entropies | None)
            triples = with_entropy(*args)
            return [[self._result(ids, lps, ents, params) for ids, lps, ents in group] for group in triples]
        return [[self._result(ids, lps, None, params) for ids, lps in group] for group in self.helper.sample(*args)]

    @staticmethod
    def _result(ids: Sequence[int], lps: Sequence[float], ents: Sequence[float] | None,
                params: SamplingParams) -> SampleResult:
        return SampleResult(tuple(ids), tuple(float(x) for x in lps), "length" if len(ids) >= params.max_tokens
                            else "stop", tuple(float(x) for x in ents) if ents is not None else None)

    def load_weights(self, update: WeightUpdate) -> None:
        self.helper.checkpoint(f"step_{update.version}")
        self._version = update.version


class HelperBackend:
    """A training backend over a TrainHelper's `train_step`, `save_adapter` and `load_state` (its capability
    flags are the registry's: `plugins.RegisteredBackend` wraps it)."""

    def __init__(self, helper: TrainHelper) -> None:
        self.helper, self._version = helper, 0

    @property
    def version(self) -> int:
        return self._version

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        loss = self.helper.train_step(batch.tokens_D, batch.logprobs_D, batch.advantages_D, lr, weight_decay)
        self._version += 1
        return TrainStepResult(loss=float(loss))

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        sft = cast("SFTStep | None", getattr(self.helper, "sft_train_step", None))
        if callable(sft):
            setattr(self.helper, SFT_LOSS_ATTRIBUTE, batch.sft_loss)
            loss = sft(batch.tokens_D, batch.advantages_D, lr, weight_decay)
        else:  # the original's fallback: an RL step with all-zero logprobs
            zeros = [[0.0] * len(row) for row in batch.tokens_D]
            loss = self.helper.train_step(batch.tokens_D, zeros, batch.advantages_D, lr, weight_decay)
        self._version += 1
        return TrainStepResult(loss=float(loss))

    def export_weights(self) -> WeightUpdate:
        return WeightUpdate(version=self._version)  # the helper syncs its sampler itself in checkpoint()

    def save_checkpoint(self, directory: Path) -> None:
        directory = Path(directory)
        reference = str(self.helper.save_adapter(str(directory), "adapter"))
        if Path(reference).is_relative_to(directory):  # the checkpoint directory is renamed once complete
            reference = str(Path(reference).relative_to(directory))
        (directory / STATE_FILE).write_text(json.dumps({"reference": reference, "version": self._version}))

    def load_checkpoint(self, directory: Path) -> None:
        state = json.loads((Path(directory) / STATE_FILE).read_text())
        reference = str(state["reference"])
        inside = Path(directory) / reference
        self.helper.load_state(str(inside) if not Path(reference).is_absolute() and inside.exists() else reference)
        self._version = int(state["version"])
