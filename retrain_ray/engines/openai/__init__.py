"""`[inference] engine = "openai" | "vllm" | "sglang" | "max" | "mlx" | "trtllm"`: an HTTP client
(engine.py) of an OpenAI-compatible server at `[inference] url`, beside the local trainer on its own
model. This module is their specs and policy factory; importing it loads no HTTP client."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.engines.types import EngineSpec

if TYPE_CHECKING:
    from retrain_ray.backends.request import PolicyRequest
    from retrain_ray.backends.types import Policy
    from retrain_ray.config.sections_runtime import InferenceSection
    from retrain_ray.config.sections_training import BackendSection


def build_policy(request: PolicyRequest) -> Policy:
    """The local trainer on its own model (`shares_model_with_engine=False`, so its `export_weights()`
    carries tensors) and an engine that samples from `[inference] url` (default per engine, as in the
    original) under the run's name, with up to `[inference] max_concurrent` parallel requests, each
    holding a slot of the request's throttle; weights reach the server by its own call
    (`UPLOAD_OF_ENGINE`)."""
    # deferred: loads httpx and the local trainer's torch, which importing the engine registry does not need
    from retrain_ray.engines.adapters import AdapterSpec
    from retrain_ray.engines.openai.engine import DEFAULT_URLS, UPLOAD_OF_ENGINE, OpenAIEngine

    cfg, settings = request.cfg, request.local_settings
    model, tokenizer = request.trainable_model()
    trainer = request.local_trainer(model, shares_model_with_engine=False)
    name = request.run_name or f"run-{uuid.uuid4().hex[:8]}"
    inf = cfg.inference
    upload = UPLOAD_OF_ENGINE[inf.engine]
    engine = OpenAIEngine(
        inf.url or DEFAULT_URLS.get(inf.engine, DEFAULT_URLS["openai"]),
        model_name=cfg.model.model, adapter_name=name,
        adapter_spec=AdapterSpec(name, 0, settings.finetune, settings.lora),
        throttle=request.throttle, seed=settings.seed, max_parallel_requests=inf.max_concurrent,
        adapter_upload=upload, adapter_dir=Path(cfg.backend.adapter_path) / "_live_adapter" if upload != "tensors" else None,
    )
    return request.policy(engine, trainer, tokenizer)


def _server_sampler(inference: InferenceSection, backend: BackendSection) -> str:
    return f"{inference.engine}: HTTP client of a server at {inference.url or 'the default url'}"


def _spec(name: str, *, shared_server: bool = False, adapter_folder_only: bool = False) -> EngineSpec:
    return EngineSpec(name, is_http=True, factory=build_policy, describe=_server_sampler,
                      shared_server=shared_server, adapter_folder_only=adapter_folder_only)


SPECS = (
    *(_spec(name, shared_server=True) for name in ("openai", "vllm", "sglang")),
    *(_spec(name, adapter_folder_only=True) for name in ("max", "mlx", "trtllm")),
)
""""vllm" (with or without url) is a client of a vLLM server, as in the original; "vllm-embedded" is
engines/vllm/."""
