"""Several runs per GPU (`[campaign] runs_per_gpu = N`): the packing of a campaign's one-GPU runs onto
cards and the memory check that refuses a packing the model cannot fit.

Each packed run (and, with `[inference] shared = true`, the campaign's engine) takes a fractional
GPU bundle of 1/N (floored to Ray's 4 decimals, so N of them always fit one card), so at most N share
a card; its vLLM `gpu_memory_utilization` (the `[inference.engine_args]` value, else 0.3) and its
trainer's memory (the process's share of the card) are divided by N.

The memory of one run is estimated from the model's config shapes (models/flops.py: `model_shapes`,
on the meta device; no weights are read, nor downloaded: a Hub model not in the cache fetches its
config.json alone), in bytes:

    trainer    = parameters x trainer width (4: float32 weights for dtype "auto", else 2)
               + trainable x 16 (float32 weight, gradient and AdamW's two moments: LoRA's or all)
               + KV/activations: KV bytes per token x max_tokens x rows per step
    sampler    = vllm-embedded: its share of the card (gpu_memory_utilization / N x the card), which
                 must hold its weights (parameters x 2, bf16) + the same KV allowance
                 the built-in sampler: the KV allowance (it samples from the trainer's weights)
                 shared engine: none in the run (the engine has its own slot)
    run        = trainer + sampler + CUDA context (0.5 GiB a process)

and N runs must fit `[campaign] gpu_memory_gib` (default 80: the planning machine may have no GPU).
Pure arithmetic except `shapes_of`, which reads the model's config.json.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.backends.registry import engine_spec
from retrain_ray.config.names import gpu_count

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import InferenceSection
    from retrain_ray.config.sections_training import BackendSection, ModelSection, TrainingSection
    from retrain_ray.models.context import ModelShapes

GIB = 2**30
CUDA_CONTEXT_GIB = 0.5
OPTIMIZER_BYTES = 16  # per trainable parameter: float32 weight, gradient and AdamW's two moments
VLLM_WIDTH = 2  # vLLM's weights on a GPU: bfloat16 for dtype "auto"
DEFAULT_VLLM_SHARE = 0.3  # engines/vllm/core.py ONE_GPU_MEMORY_SHARE: vLLM's share of a card alone


def _millions(parameters: int) -> str:
    return f"{parameters / 1e9:.2f}B" if parameters >= 1e9 else f"{parameters / 1e6:.2f}M"


def gpu_fraction(runs_per_gpu: int) -> float:
    """The GPU of one packed run's bundle: 1/N floored to Ray's 4 decimals (N of them fit one card)."""
    if runs_per_gpu <= 1:
        return 1.0
    return math.floor(10_000 / runs_per_gpu) / 10_000


def card_groups(slots: int, runs_per_gpu: int) -> list[int]:
    """How `slots` packed processes fill cards of `runs_per_gpu`: [4, 4, 2] for 10 on 4."""
    per = max(1, runs_per_gpu)
    return [min(per, slots - start) for start in range(0, slots, per)]


@dataclass(frozen=True)
class RunMemory:
    """One packed run's estimated memory (GiB) and the model it comes from."""

    model: str
    parameters: int
    weights_gib: float  # the trainer's weights
    optimizer_gib: float  # trainable parameters' state (LoRA's or all)
    kv_gib: float  # KV/activation allowance
    sampler_gib: float  # what sampling adds in the run's process (vLLM's slice or the KV allowance)
    vllm_needs_gib: float  # vLLM's weights + KV allowance, which its slice must hold (0: no vLLM in the run)

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.optimizer_gib + self.kv_gib + self.sampler_gib + CUDA_CONTEXT_GIB

    def parts(self) -> str:
        sampler = f" + sampler {self.sampler_gib:.2f}" if self.sampler_gib else ""
        return (f"trainer weights {self.weights_gib:.2f} + optimizer/LoRA state {self.optimizer_gib:.2f} + "
                f"KV/activations {self.kv_gib:.2f}{sampler} + CUDA context {CUDA_CONTEXT_GIB:.1f}")


def vllm_share(inference: InferenceSection) -> float:
    """vLLM's `gpu_memory_utilization` for a run alone on its card: `[inference.engine_args]`'s, else 0.3."""
    value = inference.engine_args.get("gpu_memory_utilization", DEFAULT_VLLM_SHARE)
    return float(value) if isinstance(value, (int, float)) else DEFAULT_VLLM_SHARE


def kv_allowance_gib(training: TrainingSection, shapes: ModelShapes) -> float:
    """KV/activation allowance of one run: KV bytes per token x max_tokens x rows per step."""
    return shapes.kv_bytes_per_token * training.max_tokens * training.rows_per_step / GIB


def run_memory(inf: InferenceSection, shapes: ModelShapes, *, model: str, kv: float, runs_per_gpu: int,
               card_gib: float) -> RunMemory:
    """The estimate of the module docstring for one run of `model` packed `runs_per_gpu` to a card, its
    inference section `inf` and KV allowance `kv` (GiB)."""
    trainer_width = 4 if inf.dtype in ("auto", "float32") else 2
    vllm_weights = shapes.parameters * (4 if inf.dtype == "float32" else VLLM_WIDTH) / GIB
    sampler, vllm_needs = kv, 0.0
    if inf.shared:
        sampler = 0.0
    elif engine_spec(inf.engine).embeds_vllm:
        sampler = vllm_share(inf) / runs_per_gpu * card_gib
        vllm_needs = vllm_weights + kv
    return RunMemory(model=model, parameters=shapes.parameters,
                     weights_gib=shapes.parameters * trainer_width / GIB,
                     optimizer_gib=shapes.trainable * OPTIMIZER_BYTES / GIB, kv_gib=kv, sampler_gib=sampler,
                     vllm_needs_gib=vllm_needs)


def engine_memory(inference: InferenceSection, shapes: ModelShapes, kv: float) -> float:
    """The shared engine's needs (GiB): its weights and the KV allowance `kv` of `max_concurrent` runs at once."""
    width = 4 if inference.dtype == "float32" else VLLM_WIDTH
    return shapes.parameters * width / GIB + kv * inference.max_concurrent


@dataclass(frozen=True)
class Packing:
    """The campaign's packing: which runs share cards, and how the memory splits."""

    runs_per_gpu: int
    packed_runs: int  # one-GPU runs (the others keep their whole GPUs, or none)
    shared_engine: bool  # the shared vLLM engine takes one slot too
    card_gib: float
    memory: RunMemory | None  # None: not estimated (nothing packed, or the model's config is not here)
    engine_gib: float = 0.0
    vllm_utilization: float = 0.0  # each run's (or the shared engine's) gpu_memory_utilization; 0: no vLLM

    @property
    def fraction(self) -> float:
        return gpu_fraction(self.runs_per_gpu)

    @property
    def slots(self) -> int:
        return self.packed_runs + (1 if self.shared_engine and self.packed_runs else 0)

    @property
    def groups(self) -> list[int]:
        return card_groups(self.slots, self.runs_per_gpu)

    def describe(self) -> list[str]:
        """The lines `retrain-ray explain` prints."""
        if not self.packed_runs:
            return [f"packing: runs_per_gpu = {self.runs_per_gpu}, but no run takes one GPU: nothing is packed"]
        what = f"{self.packed_runs} runs" + (" + the shared vLLM engine" if self.shared_engine else "")
        cards = len(self.groups)
        lines = [f"packing: {what} on {cards} GPU{'s' if cards != 1 else ''}: "
                 + " + ".join(str(g) for g in self.groups)
                 + f" (runs_per_gpu = {self.runs_per_gpu}, a bundle of GPU {self.fraction:g} each)"]
        share = self.card_gib / self.runs_per_gpu
        each = (f"  each run: 1/{self.runs_per_gpu} of the {self.card_gib:g} GiB card = {share:.1f} GiB "
                "(its process's memory limit)")
        if self.vllm_utilization and not self.shared_engine:
            each += (f"; vLLM gpu_memory_utilization {self.vllm_utilization:.3g} "
                     f"({self.vllm_utilization * self.card_gib:.1f} GiB) of it, the trainer the rest")
        lines.append(each)
        if self.shared_engine and self.vllm_utilization:
            lines.append(f"  the shared engine: gpu_memory_utilization {self.vllm_utilization:.3g} "
                         f"({self.vllm_utilization * self.card_gib:.1f} GiB; needs about {self.engine_gib:.1f} GiB)")
        if self.memory is not None:
            m = self.memory
            lines.append(f"  estimated per run: {m.total_gib:.2f} GiB ({m.parts()}; {m.model}, "
                         f"{_millions(m.parameters)} parameters) x {self.runs_per_gpu} = "
                         f"{m.total_gib * self.runs_per_gpu:.1f} GiB of {self.card_gib:g} GiB")
        else:
            lines.append("  memory not estimated: the model's config.json is not on this machine")
        return lines

    def problems(self) -> list[str]:
        """Why this packing cannot fit (the numbers and the fix); [] when it fits or nothing is packed."""
        m = self.memory
        if m is None or self.runs_per_gpu <= 1 or not self.packed_runs:
            return []
        out: list[str] = []
        need = m.total_gib * self.runs_per_gpu
        if need > self.card_gib:
            fits = int(self.card_gib // m.total_gib)
            fix = (f"lower [campaign] runs_per_gpu to {fits} (the most that fit)" if fits >= 1 else
                   "set [campaign] runs_per_gpu = 1 (not even one run fits this estimate)")
            out.append(f"[campaign] runs_per_gpu = {self.runs_per_gpu} cannot fit the model: each run needs about "
                       f"{m.total_gib:.2f} GiB ({m.parts()}; {m.model}, {_millions(m.parameters)} parameters) "
                       f"x {self.runs_per_gpu} = {need:.1f} GiB > {self.card_gib:g} GiB per card "
                       f"([campaign] gpu_memory_gib); {fix}, or raise gpu_memory_gib if the cards are bigger")
        if m.vllm_needs_gib > m.sampler_gib:
            out.append(f"[campaign] runs_per_gpu = {self.runs_per_gpu}: each run's vLLM gets gpu_memory_utilization "
                       f"{self.vllm_utilization:.3g} = {m.sampler_gib:.2f} GiB of the {self.card_gib:g} GiB card, "
                       f"less than its weights and KV allowance ({m.vllm_needs_gib:.1f} GiB); lower runs_per_gpu or "
                       "raise [inference.engine_args] gpu_memory_utilization (the value for a run alone on a card)")
        if self.shared_engine and self.engine_gib > self.vllm_utilization * self.card_gib:
            out.append(f"[campaign] runs_per_gpu = {self.runs_per_gpu}: the shared engine gets gpu_memory_utilization "
                       f"{self.vllm_utilization:.3g} = {self.vllm_utilization * self.card_gib:.1f} GiB, less than "
                       f"its weights and the KV allowance of max_concurrent runs ({self.engine_gib:.1f} GiB); lower "
                       "runs_per_gpu or raise [inference.engine_args] gpu_memory_utilization")
        return out

    def to_json(self) -> dict[str, object]:
        m = self.memory
        return {"runs_per_gpu": self.runs_per_gpu, "packed_runs": self.packed_runs, "gpus": len(self.groups),
                "groups": self.groups, "gpu_fraction": self.fraction, "shared_engine": self.shared_engine,
                "card_gib": self.card_gib, "vllm_gpu_memory_utilization": self.vllm_utilization or None,
                "per_run_gib": round(m.total_gib, 3) if m is not None else None,
                "trainer_share_gib": round(self.card_gib / self.runs_per_gpu, 3)}


def shapes_of(backend: BackendSection, model: ModelSection) -> ModelShapes | None:
    """The model's shapes from its config.json (None when it is not on this machine)."""
    # deferred: builds the architecture with transformers, needed only to check a packing
    from retrain_ray.backends.registry import lora_targets_of
    from retrain_ray.models.flops import model_shapes

    targets = lora_targets_of(backend.backend, backend.options)
    folder = config_folder(model.model, model.revision)
    if folder is None:
        return None
    try:
        return model_shapes(folder, full=model.finetune == "full", lora_rank=model.lora_rank,
                            target_modules=targets)
    except (OSError, ValueError):  # not a model transformers can build
        return None


def config_folder(model: str, revision: str = "") -> str | None:
    """A local folder with the model's config.json, never downloading weights: a Hub model's cached
    snapshot, else its config.json alone (when downloading is allowed); None when neither can be had."""
    # deferred: the model helpers load huggingface_hub, needed only to check a packing
    from retrain_ray.models.context import cached_snapshot, hub_cache_dir, hub_offline, looks_like_hub_id
    from retrain_ray.models.loading import resolve_model_path

    if not looks_like_hub_id(model):  # a built-in (built here, tiny) or a local folder
        try:
            return str(resolve_model_path(model))
        except (OSError, ValueError):
            return None
    cached = cached_snapshot(model, revision)
    if cached is not None:
        return str(cached)
    if hub_offline():
        return None
    from huggingface_hub import hf_hub_download  # pyright: ignore[reportUnknownVariableType]  # an untyped overload argument

    try:
        return str(Path(hf_hub_download(model, "config.json", revision=revision or None, cache_dir=hub_cache_dir())).parent)
    except (OSError, ValueError):  # no network, no such repo: the model check says why
        return None


def plan_packing(configs: Sequence[RetrainConfig], gpus_per_run: Sequence[int], *, runs_per_gpu: int,
                 card_gib: float) -> Packing:
    """The packing of the runs whose configs are `configs` (each taking `gpus_per_run` GPUs unpacked)."""
    packed = [c for c, g in zip(configs, gpus_per_run, strict=True) if g == 1]
    if not packed:
        return Packing(runs_per_gpu, 0, False, card_gib, None)
    cfg = packed[0]
    shared = bool(cfg.inference.shared)
    uses_vllm = engine_spec(cfg.inference.engine).embeds_vllm
    utilization = vllm_share(cfg.inference) / runs_per_gpu if uses_vllm else 0.0
    shapes = shapes_of(cfg.backend, cfg.model) if runs_per_gpu > 1 else None
    memory = None
    engine = 0.0
    if shapes is not None:
        memory = max((run_memory(c.inference, shapes, model=c.model.model, kv=kv_allowance_gib(c.training, shapes),
                                 runs_per_gpu=runs_per_gpu, card_gib=card_gib) for c in packed),
                     key=lambda m: m.total_gib)
        engine = engine_memory(cfg.inference, shapes, kv_allowance_gib(cfg.training, shapes)) if shared else 0.0
    return Packing(runs_per_gpu, len(packed), shared and uses_vllm, card_gib, memory, engine, utilization)


def packed_config(cfg: RetrainConfig, runs_per_gpu: int) -> RetrainConfig:
    """`cfg` with vLLM's `gpu_memory_utilization` divided by `runs_per_gpu` (vllm-embedded only)."""
    if runs_per_gpu <= 1 or not engine_spec(cfg.inference.engine).embeds_vllm:
        return cfg
    args = {**cfg.inference.engine_args, "gpu_memory_utilization": vllm_share(cfg.inference) / runs_per_gpu}
    return cfg.model_copy(update={"inference": cfg.inference.model_copy(update={"engine_args": args})})


def shared_engine_slot(cfg: RetrainConfig) -> tuple[RetrainConfig, float]:
    """The shared engine's config and GPUs: none on CPU; 1/N of a card, with vLLM's share divided by N,
    when runs are packed N to a card (`[campaign] runs_per_gpu`)."""
    runs_per_gpu = cfg.campaign.runs_per_gpu if cfg.campaign is not None else 1
    if gpu_count(cfg.backend.devices) == 0:
        return cfg, 0
    return packed_config(cfg, runs_per_gpu), gpu_fraction(runs_per_gpu)
