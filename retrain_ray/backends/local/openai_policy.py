"""The policy of a run that samples from an OpenAI-compatible server (`[inference] engine = "openai" |
"vllm" | "sglang" | "max" | "mlx" | "trtllm"`): the local trainer on its own model plus an `OpenAIEngine`
that syncs weights with that server's own call (`UPLOAD_OF_ENGINE`)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.backends.local.backend import LocalBackend
from retrain_ray.backends.local.policy import PolicySettings, load_trainable_model, settings_from_config
from retrain_ray.backends.types import Policy
from retrain_ray.engines.adapters import AdapterSpec
from retrain_ray.engines.openai import DEFAULT_URLS, UPLOAD_OF_ENGINE, OpenAIEngine

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.engines.types import HoldsSlots


def build_openai_policy(
    cfg: RetrainConfig, throttle: HoldsSlots | None = None, *, adapter_name: str | None = None,
    device: str = "cpu", cache_dir: Path | None = None, settings: PolicySettings | None = None,
) -> Policy:
    """The policy for `[inference] engine = "openai" | "vllm" | "sglang" | "max" | "mlx" | "trtllm"`.

    The backend is the local trainer on its own model (`shares_model_with_engine=False`, so its
    `export_weights()` carries tensors); the engine samples from `[inference] url` (default per
    engine, as in the original) under `adapter_name` (give every run its own, e.g. the run id), with
    up to `[inference] max_concurrent` parallel requests, each holding a slot of `throttle`.
    """
    settings = settings or settings_from_config(cfg)
    model, tokenizer = load_trainable_model(cfg.model.model, settings, device=device, cache_dir=cache_dir)
    backend = LocalBackend(model, shares_model_with_engine=False, **settings.backend_kwargs())
    name = adapter_name or f"run-{uuid.uuid4().hex[:8]}"
    inf = cfg.inference
    upload = UPLOAD_OF_ENGINE[inf.engine]
    engine = OpenAIEngine(
        inf.url or DEFAULT_URLS.get(inf.engine, DEFAULT_URLS["openai"]),
        model_name=cfg.model.model, adapter_name=name,
        adapter_spec=AdapterSpec(name, 0, settings.finetune, settings.lora),
        throttle=throttle, seed=settings.seed, max_parallel_requests=inf.max_concurrent,
        adapter_upload=upload, adapter_dir=Path(cfg.backend.adapter_path) / "_live_adapter" if upload != "tensors" else None,
    )
    return Policy(engine, backend, tokenizer)
