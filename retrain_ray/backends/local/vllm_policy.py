"""The policy of a run with `[inference] engine = "vllm-embedded"`: a local trainer plus vLLM.

The trainer holds its own model (`shares_model_with_engine=False`, so `export_weights()` carries
tensors) and vLLM holds another copy, fed with each version's tensors. Placements:

* CPU: both in the trial process (vLLM's CPU build).
* one GPU: both on the card; vLLM takes `gpu_memory_utilization` (default 0.3, or the value in
  `[inference.engine_args]`) and sleeps during every optimizer step (`SleepDuringUpdates`), which
  frees its KV cache and offloads its weights so the trainer has the memory.
* split: the InferenceActor builds the engine with `build_vllm_engine` on its own GPU.

`[inference] dtype` "auto" means the trainer's precision (float32 weights on CPU, bfloat16 on GPU), so
the sampler's log-probabilities are the trainer's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from retrain_ray.backends.local.backend import LocalBackend
from retrain_ray.backends.local.policy import PolicySettings, load_trainable_model, settings_from_config
from retrain_ray.backends.types import Policy, TrainBatch, TrainStepResult
from retrain_ray.engines.types import WeightUpdate
from retrain_ray.engines.vllm_embedded import VLLMEngine, VLLMSettings
from retrain_ray.models.loading import resolve_model_path

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

ONE_GPU_MEMORY_SHARE = 0.3


def vllm_settings_from_config(cfg: RetrainConfig, *, device: str, cache_dir: Path | None = None,
                              max_loras: int = 1, policy: PolicySettings | None = None) -> VLLMSettings:
    """[model], [lora] and [inference] of a RetrainConfig -> how to start vLLM for it (`policy`: the
    config's local settings, when the caller built them already)."""
    policy = policy or settings_from_config(cfg)
    inf = cfg.inference
    on_gpu = device.startswith("cuda")
    dtype = inf.dtype if inf.dtype != "auto" else ("bfloat16" if on_gpu else "float32")
    extra = dict(inf.engine_args)
    return VLLMSettings(
        model_path=str(resolve_model_path(cfg.model.model, cache_dir, revision=policy.revision,
                                          local_files_only=policy.local_files_only)),
        finetune=policy.finetune,
        lora=policy.lora, dtype=dtype, kv_cache_dtype=inf.kv_cache_dtype, prefix_caching=bool(inf.prefix_caching),
        attention_kernel=inf.attention_kernel, seed=policy.seed, max_loras=max_loras, sleep_mode=on_gpu,
        gpu_memory_utilization=extra.pop("gpu_memory_utilization", ONE_GPU_MEMORY_SHARE) if on_gpu else None,
        extra_args=extra, batching=inf.shared_batching, batch_window_s=inf.shared_batch_window_ms / 1000.0,
    )


class SleepDuringUpdates:
    """A TrainBackend that puts the engine to sleep for each update (one GPU shared with vLLM)."""

    def __init__(self, backend: LocalBackend, engine: VLLMEngine) -> None:
        self._backend, self._engine = backend, engine
        self.capabilities = backend.capabilities

    def __getattr__(self, name: str) -> object:
        return getattr(self._backend, name)

    @property
    def version(self) -> int:
        return self._backend.version

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        self._engine.sleep()
        return self._backend.train_step(batch, lr=lr, weight_decay=weight_decay)

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        self._engine.sleep()
        return self._backend.sft_step(batch, lr=lr, weight_decay=weight_decay)

    def export_weights(self) -> WeightUpdate:
        return self._backend.export_weights()

    def save_checkpoint(self, directory: Path) -> None:
        self._backend.save_checkpoint(directory)

    def load_checkpoint(self, directory: Path) -> None:
        self._backend.load_checkpoint(directory)


def build_vllm_engine(cfg: RetrainConfig, *, device: str, cache_dir: Path | None = None, name: str = "run",
                      policy: PolicySettings | None = None) -> VLLMEngine:
    settings = vllm_settings_from_config(cfg, device=device, cache_dir=cache_dir, policy=policy)
    return VLLMEngine.start(settings, name=name)


def build_vllm_policy(cfg: RetrainConfig, *, device: str | torch.device, cache_dir: Path | None = None,
                      settings: PolicySettings | None = None) -> Policy:
    """The local trainer on `device` and vLLM beside it, both from one `settings` (the config's)."""
    device = str(device)
    settings = settings or settings_from_config(cfg)
    model, tokenizer = load_trainable_model(cfg.model.model, settings, device=device, cache_dir=cache_dir)
    backend = LocalBackend(model, shares_model_with_engine=False, **settings.backend_kwargs())
    engine = build_vllm_engine(cfg, device=device, cache_dir=cache_dir, policy=settings)
    if device.startswith("cuda"):
        return Policy(engine, SleepDuringUpdates(backend, engine), tokenizer)
    return Policy(engine, backend, tokenizer)
