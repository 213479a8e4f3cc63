"""`[campaign] shared_trainer = true`: the plan of the shared trainers and the memory one of them needs.

The members' trials hold no model; each trainer holds one base copy and the adapters and AdamW states of the
runs it serves at once. On CPU there is one trainer per node, serving every concurrent run placed there (the
estimate assumes all of them on one node, the worst case); with GPUs one per GPU, serving `runs_per_gpu` runs
at once (so `max_concurrent / runs_per_gpu` GPUs). One trainer's memory, in bytes (packing.py's terms):

    base copy    = parameters x width (4: float32 for dtype "auto", else 2)
    members      = K x trainable x 16 (each run's LoRA weights, gradients and AdamW's two moments)
    activations  = K x the larger of
                     sampling: KV bytes per token x max_tokens x rows per step (none when the campaign's shared
                               vLLM engine samples: its memory is its own, packing.py)
                     training: activation elements per token (models/context.py) x width x 2 max_tokens (a
                               prompt as long as the completion assumed) x rows per forward (micro_batch_size,
                               else rows per step / gradient_accumulation_steps)
                   (the coalesced batch of K runs' steps; a round of the training step stacks every member's
                   micro-batch, so micro_batch_size is the knob that bounds it)
    + a CUDA context (0.5 GiB) on a GPU

and on a GPU it must fit `[campaign] gpu_memory_gib`, else the plan is refused with the numbers. Pure arithmetic
except `shapes_of`, which reads the model's config.json.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from retrain_ray.campaign.capacity.packing import (
    CUDA_CONTEXT_GIB,
    GIB,
    OPTIMIZER_BYTES,
    kv_allowance_gib,
    shapes_of,
)
from retrain_ray.checks.shared_trainer import samples_with_vllm

if TYPE_CHECKING:
    from retrain_ray.config.campaign_schema import CampaignSection
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_training import TrainingSection
    from retrain_ray.models.context import ModelShapes


@dataclass(frozen=True)
class TrainerMemory:
    """One shared trainer's estimated memory (GiB)."""

    model: str
    parameters: int
    base_gib: float
    members_gib: float  # every member's adapter and AdamW state
    activations_gib: float  # at the coalesced batch
    context_gib: float  # a CUDA context on a GPU, 0 on CPU

    @property
    def total_gib(self) -> float:
        return self.base_gib + self.members_gib + self.activations_gib + self.context_gib

    def parts(self, members: int) -> str:
        context = f" + CUDA context {self.context_gib:.1f}" if self.context_gib else ""
        return (f"one base copy {self.base_gib:.3f} + {members} adapters and AdamW states {self.members_gib:.3f} + "
                f"activations at the coalesced batch {self.activations_gib:.3f}{context}")


@dataclass(frozen=True)
class SharingPlan:
    """How a shared campaign's runs map onto trainers, and what one trainer holds."""

    runs: int
    members: int  # runs one trainer serves at once
    trainers: int  # GPUs on a GPU plan; 0 on CPU (one per node the runs land on)
    gpu: bool
    card_gib: float
    memory: TrainerMemory | None  # None: the model's config.json is not on this machine
    vllm: bool = False  # the campaign's shared vLLM engine samples (else the trainer, from its own copy)
    steered: bool = False  # the pooled back pressure sets how many members one batched step takes

    def describe(self) -> list[str]:
        """The lines `retrain-ray explain` prints."""
        where = (f"{self.trainers} GPU{'s' if self.trainers != 1 else ''}: per GPU one trainer" if self.gpu else
                 "CPU: per node one trainer")
        role = ("it trains; the campaign's shared vLLM engine samples, each run under its own adapter, synced "
                "from the trainer after every step" if self.vllm else "it trains and samples, with the PyTorch "
                "engine on its own copy")
        head = (f"shared trainer: {self.runs} LoRA runs on {where} ({role}), {self.members} runs "
                "at once each; the runs' trials hold no model")
        return [head, self._memory_line(), *self._steering_lines()]

    def _memory_line(self) -> str:
        m = self.memory
        if m is None:
            return "  memory not estimated: the model's config.json is not on this machine"
        limit = f" of {self.card_gib:g} GiB per GPU" if self.gpu else ""
        return (f"  estimated per trainer: {m.total_gib:.2f} GiB{limit} ({m.parts(self.members)}; {m.model}, "
                f"{m.parameters / 1e6:.1f}M parameters)")

    def _steering_lines(self) -> list[str]:
        if not self.steered:
            return []
        return [f"  back pressure (pooled) sets how many of the {self.members} members one batched step takes: it "
                "sweeps 1, 2, 4, ... and keeps the peak of the pooled tokens/s (bp_capacity in the runs' rows)"]

    def problems(self) -> list[str]:
        """Why one trainer cannot fit its GPU (the numbers and the fix); [] when it fits or runs on CPU."""
        m = self.memory
        if m is None or not self.gpu or m.total_gib <= self.card_gib:
            return []
        per_run = (m.members_gib + m.activations_gib) / max(self.members, 1)
        fits = int((self.card_gib - m.base_gib - m.context_gib) // per_run) if per_run else 0
        fix = (f"lower [campaign] runs_per_gpu to {fits} (the most members that fit)" if fits >= 1 else
               "train these runs alone (shared_trainer = false): not even the base copy and one member fit")
        micro = (", or set [training] micro_batch_size (a round of the coalesced step holds every member's "
                 "micro-batch)" if m.activations_gib > m.members_gib + m.base_gib else "")
        return [f"[campaign] shared_trainer: one trainer cannot fit its GPU: {m.total_gib:.2f} GiB "
                f"({m.parts(self.members)}) > {self.card_gib:g} GiB ([campaign] gpu_memory_gib); {fix}{micro}, or "
                "raise gpu_memory_gib if the cards are bigger"]

    def to_json(self) -> dict[str, object]:
        m = self.memory
        return {"runs": self.runs, "members_per_trainer": self.members, "gpus": self.trainers if self.gpu else 0,
                "sampler": "vllm-embedded (shared)" if self.vllm else "pytorch (the trainer's copy)",
                "per_trainer_gib": round(m.total_gib, 3) if m is not None else None, "card_gib": self.card_gib,
                "steered_by_backpressure": self.steered}


def training_activations_gib(training: TrainingSection, shapes: ModelShapes, width: int) -> float:
    """What one run's training forward keeps for its backward (the module docstring's training term)."""
    rows = training.rows_per_step
    per_forward = training.micro_batch_size or math.ceil(rows / max(training.gradient_accumulation_steps, 1))
    tokens = min(per_forward, rows) * 2 * training.max_tokens
    return tokens * shapes.activation_elements_per_token * width / GIB


def trainer_memory(cfg: RetrainConfig, members: int, *, gpu: bool, samples: bool = True) -> TrainerMemory | None:
    """The estimate of the module docstring for one trainer of `cfg`'s model serving `members` runs at once
    (`samples`: it samples from its copy too)."""
    shapes = shapes_of(cfg.backend, cfg.model)
    if shapes is None:
        return None
    width = 4 if cfg.inference.dtype in ("auto", "float32") else 2
    sampling_gib = kv_allowance_gib(cfg.training, shapes) if samples else 0.0
    return TrainerMemory(model=cfg.model.model, parameters=shapes.parameters,
                         base_gib=shapes.parameters * width / GIB,
                         members_gib=members * shapes.trainable * OPTIMIZER_BYTES / GIB,
                         activations_gib=members * max(sampling_gib,
                                                       training_activations_gib(cfg.training, shapes, width)),
                         context_gib=CUDA_CONTEXT_GIB if gpu else 0.0)


def plan_sharing(configs: Sequence[RetrainConfig], campaign: CampaignSection, concurrent: int) -> SharingPlan:
    """The shared trainers of a campaign of `configs` (its runs) with `concurrent` runs at once."""
    first = configs[0]
    gpu = first.backend.devices.strip().lower().startswith("gpu")
    concurrent = max(1, min(concurrent, len(configs)))
    members = min(concurrent, campaign.runs_per_gpu) if gpu else concurrent
    vllm = samples_with_vllm(first)
    return SharingPlan(runs=len(configs), members=members, trainers=math.ceil(concurrent / members) if gpu else 0,
                       gpu=gpu, card_gib=float(campaign.gpu_memory_gib),
                       memory=trainer_memory(first, members, gpu=gpu, samples=not vllm), vllm=vllm,
                       steered=first.backpressure.enabled and first.backpressure.pooled)
