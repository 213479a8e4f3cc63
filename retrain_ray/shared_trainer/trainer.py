"""`SharedTrainer`: one base model, many member runs' LoRA adapters and AdamW states resident, one
batched step for all of them (step.py). A library, no Ray: a trainer actor hosts it.

A member joins with its run's `PolicySettings` (what its solo backend would be built from: backends/local/
policy.py `settings_from_config`) and gets the very adapter its solo model would start with; it trains
with `train_step({run_id: StepRequest, ...})`, which updates only the runs named, and leaves with
`remove_run`, dropping its state without touching the others'. Its checkpoint files are the solo
backend's (`adapter/` in PEFT's format, `optimizer.pt` in torch's), so a run moves between the shared
trainer and its own process in either direction and continues exactly.

What cannot share, refused when the run joins with the reason: full fine-tuning, LoRA dropout above zero
(its random masks could not follow the solo run's), other target modules or layers than the trainer's,
another dtype, and a model other than a built-in one (the lean Llama: the wrapping and the adapter files
are written for it; transformers models are not wired yet). Ranks may differ: smaller adapters are
zero-padded to the largest rank in the batched matmuls, exactly.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import cast

import torch
from safetensors.torch import save_file  # pyright: ignore[reportUnknownVariableType]

from retrain_ray.backends.local import checkpoint as ckpt
from retrain_ray.backends.local.policy import PolicySettings
from retrain_ray.engines.pytorch.engine import eos_ids, pad_id
from retrain_ray.engines.types import SampleResult, WeightUpdate
from retrain_ray.engines.weights import ModeSwitch
from retrain_ray.models import Tokenizer
from retrain_ray.models.context import lean_applies
from retrain_ray.models.lean_llama import LeanLlamaForCausalLM
from retrain_ray.models.lean_loading import load_lean_model_and_tokenizer
from retrain_ray.models.lean_lora import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    copy_adapter_file,
    peft_adapter_config,
    saved_name,
)
from retrain_ray.models.lora import LoraSettings
from retrain_ray.shared_trainer.adapters import RunAdapter, new_adapter
from retrain_ray.shared_trainer.grouped_lora import AdapterRouting, ModuleLayout, wrap_targets
from retrain_ray.shared_trainer.routing import route
from retrain_ray.shared_trainer.sampling import (
    SamplingStreams,
    by_prompt,
    check_requests,
    decode,
    layout_rows,
    results_of,
)
from retrain_ray.shared_trainer.step import SharedStepResult, shared_step
from retrain_ray.shared_trainer.types import SampleRequest, StepRequest


class SharedTrainerError(ValueError):
    """A run that cannot join this trainer, or a call about a run that is not a member; says why and the fix."""


class SharedTrainer:
    """One base copy of `model` (frozen) with grouped LoRA on the `layout`'s targets; members by run id."""

    def __init__(self, model: LeanLlamaForCausalLM, layout: LoraSettings, *, dtype: str = "auto",
                 eos_token_ids: Sequence[int] = (), pad_token_id: int | None = None) -> None:
        for p in model.parameters():
            p.requires_grad_(False)
        self.model = model
        self.layout = layout
        self.dtype = dtype
        self.modules = ModuleLayout.of(model)
        self.targets = self.modules.present(layout.target_modules)
        self.keys = self.modules.keys(layout.target_modules, layout.layers_to_transform, layout.layers_pattern)
        self.routing = AdapterRouting()
        self.bases = wrap_targets(model, self.keys, self.routing)
        self.device = next(model.parameters()).device
        self._modes = ModeSwitch(model)
        self._members: dict[str, RunAdapter] = {}
        self.eos_ids, self.pad_token_id = _stop_and_pad(model, eos_token_ids, pad_token_id)
        self.streams = SamplingStreams(self.device)

    @classmethod
    def load(cls, name_or_path: str | Path, layout: LoraSettings, *, device: str | torch.device = "cpu",
             cache_dir: Path | None = None, dtype: str = "auto") -> SharedTrainer:
        """The trainer over one copy of a model the lean path loads, on `device`."""
        if not lean_applies(name_or_path, trust_remote_code=False):
            raise SharedTrainerError(
                f"model {str(name_or_path)!r}: the shared trainer runs the models the lean path loads (builtin:..., "
                "smollm2:135m, plain Llama folders: docs/models.md) only; train this run alone (without [campaign] "
                "shared_trainer)")
        model, tokenizer = load_lean_model_and_tokenizer(name_or_path, cache_dir=cache_dir, dtype=dtype)
        return cls(model.to(torch.device(device)), layout, dtype=dtype, eos_token_ids=eos_ids(model, cast("Tokenizer", tokenizer)),
                   pad_token_id=pad_id(cast("Tokenizer", tokenizer)))

    # ---- members -------------------------------------------------------------------------------
    @property
    def members(self) -> list[str]:
        return list(self._members)

    def join_problems(self, run_id: str, settings: PolicySettings) -> list[str]:
        """Every reason the run cannot join (empty: it can)."""
        lora = settings.lora
        problems: list[str] = []
        if run_id in self._members:
            problems.append(f"run {run_id!r} is already a member: remove it first")
        if settings.finetune != "lora":
            problems.append(f"finetune = {settings.finetune!r}: only LoRA runs share a base model")
        if lora.dropout > 0:
            problems.append(f"lora dropout = {lora.dropout}: its random masks could not follow the solo run's; "
                            "set [lora] dropout = 0 or train this run alone")
        if settings.dtype != self.dtype:
            problems.append(f"dtype {settings.dtype!r}: this trainer's base is {self.dtype!r}")
        try:
            keys = self.modules.keys(lora.target_modules, lora.layers_to_transform, lora.layers_pattern)
        except ValueError as exc:
            return [*problems, str(exc)]
        if keys != self.keys:
            differ = sorted(set(keys) ^ set(self.keys))[:3]
            problems.append(f"LoRA targets differ from this trainer's (e.g. {differ}): members need the same "
                            "lora_target_modules, lora_layers_to_transform and lora_layers_pattern")
        return problems

    def add_run(self, run_id: str, settings: PolicySettings) -> None:
        """Makes the run a member with the adapter its solo model would start with (its `settings.seed`)."""
        problems = self.join_problems(run_id, settings)
        if problems:
            raise SharedTrainerError(f"run {run_id!r} cannot join the shared trainer: " + "; ".join(problems))
        self._members[run_id] = new_adapter(run_id, settings, self.bases, self.keys, self.device)

    def remove_run(self, run_id: str) -> None:
        """Drops the run's adapter and optimizer state; the other members are untouched."""
        self._member(run_id)
        del self._members[run_id]
        self.streams.drop(run_id)

    def _member(self, run_id: str) -> RunAdapter:
        if run_id not in self._members:
            raise SharedTrainerError(f"run {run_id!r} is not a member of this shared trainer "
                                     f"(members: {sorted(self._members)}); add it with add_run first")
        return self._members[run_id]

    def version(self, run_id: str) -> int:
        return self._member(run_id).version

    # ---- training -------------------------------------------------------------------------------
    def train_step(self, requests: Mapping[str, StepRequest]) -> SharedStepResult:
        """One update of each named member from its own request, in one batched forward/backward per round."""
        members = [(self._member(run_id), request) for run_id, request in requests.items()]
        self._modes.set(True)
        return shared_step(self.model, self.routing, self.keys, members, self.device)

    def generate(self, requests: Mapping[str, SampleRequest]) -> dict[str, list[list[SampleResult]]]:
        """Each named member's `results[P][num_samples]`, all runs' rows in one batched decode from this one
        copy, each under its own adapter and drawn from its own generator (sampling.py)."""
        check_requests(dict(requests))
        run_ids = list(requests)
        ordered = [requests[r] for r in run_ids]
        generators = [self.streams.for_call(r, requests[r].seed) for r in run_ids]
        rows_N, spans, rows_B = layout_rows(ordered, generators)
        self._modes.set(False)
        with self.serving(run_ids, rows_B) as model:
            trace = decode(model, rows_N, spans, eos_ids=self.eos_ids, pad_token_id=self.pad_token_id,
                           device=self.device)
        return {r: by_prompt(results_of(span, trace, self.eos_ids), request)
                for r, span, request in zip(run_ids, spans, ordered, strict=True)}

    @contextlib.contextmanager
    def serving(self, run_ids: Sequence[str], rows_B: torch.Tensor) -> Generator[torch.nn.Module]:
        """The base model with row b of the forwards inside the block under run `run_ids[rows_B[b]]`'s
        adapter, for scoring or sampling from this one copy (no gradient: the weights are read, not trained).
        One run for every row: `serving([run_id], torch.zeros(B, dtype=torch.long))`."""
        adapters = [self._member(run_id) for run_id in run_ids]
        with torch.no_grad():
            route(self.routing, self.keys, adapters, rows_B.to(self.device))
        try:
            yield self.model
        finally:
            self.routing.clear()

    # ---- weights and checkpoints ----------------------------------------------------------------
    def export_weights(self, run_id: str) -> WeightUpdate:
        """CPU copies of the run's trainable weights under its solo model's names (a weight sync)."""
        adapter = self._member(run_id)
        return WeightUpdate(version=adapter.version,
                            tensors={n: p.detach().to("cpu", copy=True) for n, p in adapter.trainable().items()})

    def export_adapter(self, run_id: str) -> WeightUpdate:
        """The run's whole adapter (frozen A too), CPU copies by its solo model's names, at its version: the
        weight sync of an engine that holds its own base copy and loads adapters whole (the shared vLLM engine)."""
        return WeightUpdate(version=self.version(run_id), tensors=self.adapter_tensors(run_id))

    def adapter_tensors(self, run_id: str) -> dict[str, torch.Tensor]:
        """Every LoRA weight of the run (frozen A too) by its solo model's parameter name, CPU copies."""
        return {n: p.detach().to("cpu", copy=True) for n, p in self._member(run_id).named.items()}

    def optimizer_state(self, run_id: str) -> dict[str, object]:
        return self._member(run_id).optimizer.state_dict()

    def save_checkpoint(self, run_id: str, directory: Path) -> None:
        """The solo backend's files: `adapter/` (PEFT format) and `optimizer.pt`, in an existing directory."""
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"checkpoint directory {directory} does not exist (the caller creates it)")
        adapter = self._member(run_id)
        lora = adapter.settings.lora
        folder = directory / ckpt.ADAPTER_DIR
        folder.mkdir(parents=True, exist_ok=True)
        config = peft_adapter_config(self.model, rank=lora.rank, alpha=lora.effective_alpha, dropout=lora.dropout,
                                     target_modules=self.targets, layers_to_transform=lora.layers_to_transform,
                                     layers_pattern=lora.layers_pattern)
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))
        tensors = {saved_name(n): p.detach().contiguous() for n, p in adapter.named.items()}
        save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
        ckpt.save_optimizer(adapter.optimizer, adapter.version, directory)

    def load_checkpoint(self, run_id: str, directory: Path) -> None:
        """Loads a run's checkpoint (written here or by its solo backend) into its member state."""
        directory = Path(directory)
        adapter = self._member(run_id)
        folder = directory / ckpt.ADAPTER_DIR
        if not (folder / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(f"{folder} holds no PEFT adapter: is {directory} a LoRA checkpoint?")
        copy_adapter_file(folder, dict(adapter.named), owner=f"run {run_id!r}")
        adapter.version = ckpt.load_optimizer(adapter.optimizer, directory)



def _stop_and_pad(model: LeanLlamaForCausalLM, eos_token_ids: Sequence[int], pad_token_id: int | None
                  ) -> tuple[list[int], int]:
    """The sampler's stop ids and pad id: the tokenizer's (`load`), else the model's generation config."""
    stops = list(eos_token_ids)
    if not stops:
        found = model.generation_config.eos_token_id
        stops = [found] if isinstance(found, int) else list(found or [])
    pad = pad_token_id if pad_token_id is not None else model.generation_config.pad_token_id
    if not stops or pad is None:
        raise SharedTrainerError("the model names no EOS or pad token id (generation_config.json): pass "
                                 "eos_token_ids and pad_token_id to SharedTrainer")
    return stops, pad
