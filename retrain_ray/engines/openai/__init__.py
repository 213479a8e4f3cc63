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
        engine_name=inf.engine,
    )
    return request.policy(engine, trainer, tokenizer)


def _server_sampler(inference: InferenceSection, backend: BackendSection) -> str:
    return f"{inference.engine}: HTTP client of a server at {inference.url or 'the default url'}"


def _spec(name: str, *, shared_server: bool = False, lora_only_reason: str = "",
          url_required_reason: str = "") -> EngineSpec:
    return EngineSpec(name, is_http=True, factory=build_policy, describe=_server_sampler,
                      shared_server=shared_server, adapter_folder_only=bool(lora_only_reason),
                      lora_only_reason=lora_only_reason, url_required_reason=url_required_reason)


_FOLDERS_ONLY = "its server loads the trainer's weights as a LoRA adapter folder only"
VLLM_FULL_WEIGHTS = (
    "vLLM's OpenAI server takes a run's weights over HTTP as LoRA adapters only: its weight-update routes "
    "(/init_weight_transfer_engine, /update_weights) move tensors by NCCL or CUDA IPC between GPUs, and "
    "/collective_rpc reload_weights needs VLLM_SERVER_DEV_MODE and does not redo the CPU build's prepacked LM "
    'head; engine = "vllm-embedded" pushes full weights into vLLM inside the run')
SGLANG_FULL_WEIGHTS = (
    "SGLang's full-weight routes (/update_weights_from_disk, /update_weights_from_distributed) are not "
    "implemented here, since SGLang does not install on this project's test machines to test them")
MAX_URL = ("the original runs MAX in-process when no url is given; retrain-ray is only a client of a "
           "`max serve --model MODEL --enable-lora` server")

SPECS = (
    _spec("openai", shared_server=True),
    _spec("vllm", shared_server=True, lora_only_reason=VLLM_FULL_WEIGHTS),
    _spec("sglang", shared_server=True, lora_only_reason=SGLANG_FULL_WEIGHTS),
    _spec("max", lora_only_reason=_FOLDERS_ONLY, url_required_reason=MAX_URL),
    *(_spec(name, lora_only_reason=_FOLDERS_ONLY) for name in ("mlx", "trtllm")),
)
""""vllm" (with or without url) is a client of a vLLM server, as in the original; "vllm-embedded" is
engines/vllm/."""
